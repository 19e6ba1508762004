"""The fault campaign (issue 4): many tickets through real workers while a
seeded nemesis injects faults, then every invariant checked over the whole
system (our database and the sandbox's side effects).

`python -m bench.chaos` (what `make chaos` runs), with SEED and SESSIONS in
the environment; see bench/chaos/campaign.py for the run and README.md here
for what each part does.
"""
