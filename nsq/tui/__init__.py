"""Textual apps over the cluster's HTTP APIs: ``nsq admin``, live ``nsq stat``,
and :mod:`nsq.tui.serve` to serve them to a browser.

Kept import-light on purpose: nothing here imports Textual, so commands
can check their flags (and ``--help`` answers) before the TUI loads.
"""
