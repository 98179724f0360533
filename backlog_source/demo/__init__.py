"""The main job of ``make demo``: drain a backlog, switch to low latency, show it.

Modules: :mod:`.settings` (options: command line, ``BACKLOG_*`` variables, ``.env``),
:mod:`.traffic` (the live producer), :mod:`.monitor` (what the query did, from its progress
events), :mod:`.view` (the live terminal view), :mod:`.report` (summary and timeline),
:mod:`.app` (runs it all).
"""
