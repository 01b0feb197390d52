"""The utilities as libraries, built on :mod:`nsq.client` and
:mod:`nsq.cluster`: what ``nsq stat`` (:mod:`.stat`), ``nsq pub``
(:mod:`.pub`), ``nsq tail`` (:mod:`.tail`), ``nsq to-file``
(:mod:`.to_file`), ``nsq to-http`` (:mod:`.to_http`), ``nsq to-nsq``
(:mod:`.to_nsq`), ``nsq bench`` (:mod:`.bench`) and ``nsq cluster``
(:mod:`.cluster`) do, as nsqio/nsq's ``apps/<tool>/`` packages. The
``nsq.commands`` modules only parse flags and call into these; import the
module you need (nothing is re-exported here, so importing one tool does
not load the others).
"""

__all__: list[str] = []
