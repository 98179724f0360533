"""The main job of ``make demo``: drain a backlog, switch to low latency, show it. Demo
tooling, never on a query's path (``backlog-source demo`` imports it; the source does not).

Modules: :mod:`.settings` (options: command line, ``BACKLOG_*`` variables, ``.env``),
:mod:`.traffic` (the live producer), :mod:`.monitor` (what the query did, from its progress
events), :mod:`.view` (the live terminal view), :mod:`.report` (summary and timeline),
:mod:`.app` (runs it all).
"""
