"""Context engines: the interface (engine.py), the built-in compressor (compressor.py, with
the summary prefixes in summary.py), which engine a session gets and how it is called
(engines.py), the context host that fits each turn's messages to the model's window (host.py),
and the request-only shortening of a request still over a small window (fit.py). It touches the
store only through what it is handed."""
