"""The utilities as libraries: what ``nsq to-file`` (and the other consuming
tools) do, built on :mod:`nsq.client`. The ``nsq.commands`` modules only
parse flags and call into these."""
