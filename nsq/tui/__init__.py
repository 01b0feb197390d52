"""Textual apps over :mod:`nsq.cluster`: ``nsq admin`` (:mod:`nsq.tui.admin`),
live ``nsq stat`` (:mod:`nsq.tui.stat`), and :mod:`nsq.tui.serve` to serve
them to a browser. What they show is read and aggregated by
:mod:`nsq.cluster` (no Textual there); :mod:`.widgets` and :mod:`.fmt` are
the pieces the apps share.

Kept import-light on purpose: nothing here imports Textual, so commands
can check their flags (and ``--help`` answers) before the TUI loads.
"""
