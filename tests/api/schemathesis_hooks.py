"""schemathesis hooks (loaded through SCHEMATHESIS_HOOKS).

Generated Idempotency-Key values collide ("0" for many cases), and the same
key with another request is rightly a 422 here (Stripe's semantics), which
schemathesis would read as a valid request rejected. Each case gets a key of
its own; the key's semantics have their own tests (test_idempotency.py).
"""

import uuid

import schemathesis


@schemathesis.hook
def before_call(ctx, case, **kwargs):
    key = (case.headers or {}).get("Idempotency-Key")
    # Only a valid key is replaced: a negative case's bad key must stay bad.
    if isinstance(key, str) and key.strip() and len(key) <= 255:
        case.headers["Idempotency-Key"] = f"st-{uuid.uuid4()}"
