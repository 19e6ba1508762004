"""Durable browser sessions (issue 25): an agent that works a web page.

- tools.py / submit.py: browser_open, _read, _click, _fill, _submit,
  _screenshot, built for a profile's BrowserConfig (config.py: allowed URL
  prefixes, side-effect forms and their checks, budgets per turn);
- actions.py: one action end to end (load and open the state, lease a
  context, act, read, screenshot, seal and write the state with the step's
  `browser.step` event);
- host.py: one Chromium per worker process on a thread of its own (an
  asyncio loop: Playwright is bound to one thread), a bounded set of
  contexts, one per active session, restored from Postgres when new here;
- guard.py: least privilege by request interception (only the profile's
  URLs; redirects checked hop by hop; no pop-ups, downloads, uploads,
  service workers; never the desk's origin), every refusal recorded;
- state.py / crypto.py / models.py: the state in Postgres, AES-GCM sealed
  with AGENTDESK_BROWSER_KEY, written after every action;
- page.py: what the browser does on a page, and what the model reads
  (bounded text, forms, links; framed as untrusted);
- profiles.py: the carrier_claims profile (the sandbox's carrier portal);
  demo.py: the demo's lost-parcel ticket.
"""
