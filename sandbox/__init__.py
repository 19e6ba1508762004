"""The sandbox: Agentdesk's stand-in outside world (helpdesk, payments, model).

A separate process with its own SQLite storage; run it with
`python -m sandbox --data PATH`, or serve `sandbox.app.create_app(PATH)`.
"""
