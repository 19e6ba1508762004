"""browser_submit: the one browser action that may change the world.

A form the profile marks as a side effect is submitted only with a person's
approval, through the one gate (agents/gate.py, approvals/gate.py): the tool
fills (or restores) the form, screenshots it, asks `ctx.steps.gate(...)`
with side_effect=True, and raises NeedsApproval with a preview (the
screenshot as a data URL, the fields and their values) for the card. The
runtime parks; a decision re-runs this call with the same tool_use_id:
approved -> `steps.begin` (durable, fenced, before anything leaves) ->
submit once -> `steps.end`; denied -> the model reads why.

Exactly once across a crash: before the submit leaves, the session's state
row records it as pending (its idempotency key and the form's values,
sealed) in its own commit. A re-run that finds its own submit pending does
not know what happened: with the profile's check (a "my claims" page) it
looks for the reference this submit carried (`reference`, written into the
form before the preview), and either reports the confirmation found or goes
back to the form and submits it as approved (the check says it never
arrived); without a check, or a reference, the outcome is unknown
(in_doubt, a person decides).

A call run outside the engine (no `steps`) is not gated here: only the
engine runs agents' tools.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import re
from typing import Any

from agents.gate import NeedsApproval
from agents.tools.base import Kind, OutcomeUnknown, ToolContext, ToolError, ToolOutput
from capabilities.browser import actions, page, state
from capabilities.browser.config import BrowserConfig, SubmitCheck

STEP = 1  # the submit is inner step 1 of its call
PREVIEW_SHOT_QUALITY = 50
MAX_PREVIEW_BYTES = 200_000


def submit_tool(tool) -> Any:
    return tool(
        "browser_submit",
        "Submit a form on the current page, by its id or name. A form that changes "
        "something waits for a person's approval first; you are told if they deny it.",
        {
            "properties": {"form": {"type": "string", "minLength": 1, "maxLength": 100}},
            "required": ["form"],
        },
        _submit,
        # The call owns its inner step's judgment after a crash (the check,
        # below): the runtime may run it again, with the same key.
        Kind.IDEMPOTENT_BY_KEY,
        gated_inside=True,  # it asks the gate itself, with the form's values
    )


def _submit(config: BrowserConfig, ctx: ToolContext, arguments: dict[str, Any]) -> ToolOutput:
    form = arguments["form"]
    call, loaded = actions.begin(config, ctx)
    if loaded.pending_key == ctx.idempotency_key:
        return _in_doubt(config, ctx, call, loaded, form)
    fields: dict[str, str] = {}
    if ctx.steps is not None:
        try:
            done, fields = _gate(config, ctx, call, loaded, form, ctx.steps)
        except _Pending:  # begun, then the worker died before our own mark
            return _in_doubt(config, ctx, call, loaded, form)
        if done is not None:
            return done
    return _send(config, ctx, call, loaded, form, fields)


def _gate(config, ctx, call, loaded, form, steps) -> tuple[ToolOutput | None, dict[str, str]]:
    """Inner step 1 as the gate and a person left it: (a result, or None to
    submit now; the fields as approved, an approver's edits included)."""
    inner = next((s for s in steps.log() if s.n == STEP), None)
    if inner is not None:
        status = str(inner.status)
        if status in ("denied", "canceled"):
            raise ToolError(f"a person denied this submit: {inner.reason or 'no reason given'}")
        if status in ("succeeded", "failed"):
            return ToolOutput(str(inner.output), is_error=status == "failed"), {}
        if status == "running":  # begun, and no outcome recorded
            raise _Pending()
        if status == "in_doubt":
            raise OutcomeUnknown(f"the submit of {form!r} is in doubt: {inner.output}")
        return None, dict((inner.input or {}).get("fields") or {})  # approved (maybe edited)
    verdict = steps.gate(
        "browser_submit",
        {"form": form},
        kind="browser",
        tool_kind=Kind.NOT_IDEMPOTENT,
        side_effect=config.is_side_effect(form),
    )
    if verdict.decision == "refuse":
        raise ToolError(f"refused by policy ({verdict.policy}): {verdict.detail}")
    if verdict.decision != "wait":
        return None, {}
    preview = _preview(config, ctx, call, loaded, form)
    # The session waits on a person.
    actions.close_for(ctx.session_key, session_id=call.session_id, turn_id=call.turn_id)
    raise NeedsApproval(
        step=STEP,
        name="browser_submit",
        arguments={"form": form, "fields": preview["fields"]},
        verdict=verdict,
        preview=preview,
        tool_kind=Kind.NOT_IDEMPOTENT,
    )


class _Pending(Exception):
    pass


def reference(idempotency_key: str) -> str:
    """This submit's own reference: the same on every run of its call (a
    re-run after a crash looks for it), different for every other submit."""
    return "AD-" + hashlib.sha256(idempotency_key.encode()).hexdigest()[:12].upper()


def _stamp(config: BrowserConfig, ctx: ToolContext, form: str) -> dict[str, str]:
    check = config.check_for(form)
    return {check.field: reference(ctx.idempotency_key)} if check is not None else {}


def _preview(config, ctx, call, loaded, form) -> dict[str, Any]:
    ms = config.action_timeout_s * 1000

    async def work(slot):
        # Ours, before a person sees the form: the approved values carry it.
        filled = await page.fill_changed(slot, form, _stamp(config, ctx, form), ms)
        return {"values": await page.form_values(slot.page, form), "filled": filled}

    loaded.actions += 1
    result = actions.in_browser(
        config, ctx.session_key, loaded, work, shot_quality=PREVIEW_SHOT_QUALITY
    )
    if result.error:
        raise ToolError(result.error)
    actions.record(loaded, call, "submit.preview", {"form": form}, result)
    shot = result.shot if len(result.shot) < MAX_PREVIEW_BYTES else ""
    return {
        "kind": "browser_submit",
        "url": result.snap["url"][:500],
        "title": result.snap["title"][:200],
        "form": form,
        "fields": result.extra["values"],
        "screenshot": shot,
    }


def _send(config, ctx, call, loaded, form, edited: dict[str, str], reopen: str = "") -> ToolOutput:
    """Fill what the approver edited, mark the submit pending (durably), submit
    once. `reopen`: the form's page, opened again first (after a check)."""
    ready, go = actions.handshake()
    ms = config.action_timeout_s * 1000

    async def work(slot):
        if reopen:
            await page.go(slot.page, reopen, ms)
        # As approved (an approver may have changed a value), with our
        # reference if the form has none yet.
        await page.fill_changed(slot, form, {**_stamp(config, ctx, form), **edited}, ms)
        values = await page.form_values(slot.page, form)
        ready.set_result(values)
        await actions.wait_go(go)  # the pending mark is committed: now it may leave
        await page.submit(slot, form, ms)
        return {"values": values}

    loaded.actions += 1
    running = actions.start(config, ctx.session_key, loaded, work)
    concurrent.futures.wait([ready, running], return_when=concurrent.futures.FIRST_COMPLETED)
    if ready.done():
        try:
            _mark_pending(ctx, loaded, form, ready.result())
        except BaseException as exc:
            go.set_exception(exc)
            actions.finish(config, running)
            raise
        go.set_result(True)
    result = actions.finish(config, running)
    loaded.pending_key, loaded.pending_form = "", ""
    loaded.data.pop("submitting", None)
    actions.record(loaded, call, "submit", {"form": form}, result)
    _end(ctx, result)
    text, is_error = actions.output(result)
    return ToolOutput(text, is_error=is_error)


def _mark_pending(ctx: ToolContext, loaded: state.Loaded, form: str, values: dict) -> None:
    if ctx.steps is not None:  # the durable inner step (fenced: a lost claim stops here)
        ctx.steps.begin(
            STEP, "browser_submit", {"form": form, "fields": values}, tool_kind=Kind.NOT_IDEMPOTENT
        )
    loaded.pending_key, loaded.pending_form = ctx.idempotency_key, form
    loaded.data["submitting"] = {"form": form, "values": values}
    state.save(loaded, step=None, turn_id=None)


def _end(ctx: ToolContext, result: actions.Result) -> None:
    if ctx.steps is not None:
        text, is_error = actions.output(result)
        status = "failed" if is_error else "succeeded"
        ctx.steps.end(STEP, status=status, output=text[:4000], is_error=is_error)


def _in_doubt(config, ctx, call, loaded, form) -> ToolOutput:
    """Our submit left (or was about to) and no outcome was recorded."""
    check = config.check_for(form)
    if check is None:
        raise OutcomeUnknown(
            f"the worker stopped while submitting {form!r}; whether it went through is "
            "unknown and the profile names no check"
        )
    values = (loaded.data.get("submitting") or {}).get("values") or {}
    ours = values.get(check.field, "")
    if not ours:
        raise OutcomeUnknown(
            f"the worker stopped while submitting {form!r}; it carried no reference in "
            f"{check.field!r} that the check could look for"
        )
    form_url = loaded.data.get("url", "")
    found = _look(config, ctx, call, loaded, check, ours)
    if found is not None:
        loaded.pending_key, loaded.pending_form = "", ""
        loaded.data.pop("submitting", None)
        state.save(loaded, step=None, turn_id=None)
        text = (
            f"The form {form!r} was submitted before the worker stopped; the check on "
            f"{found['url']} shows it: {found['row']}"
        )
        _end_text(ctx, text)
        return ToolOutput(text)
    # It never arrived: back to the form, filled as submitted; it goes now, once.
    return _send(config, ctx, call, loaded, form, values, reopen=form_url)


def _look(config, ctx, call, loaded, check: SubmitCheck, value: str) -> dict | None:
    from capabilities.browser.guard import expand

    url = expand(check.url)

    async def work(slot):
        await page.go(slot.page, url, config.action_timeout_s * 1000)
        rows = await slot.page.locator("tr").all_inner_texts()
        return {"rows": rows}

    loaded.actions += 1
    result = actions.in_browser(config, ctx.session_key, loaded, work)
    actions.record(loaded, call, "submit.check", {"url": url, "field": check.field}, result)
    if result.error:
        raise OutcomeUnknown(f"the check on {url} failed: {result.error}")
    for row in (result.extra or {}).get("rows", []):
        if value in row:
            match = re.search(check.confirmation, row)
            shown = match.group(0) if match else row.strip()[:200]
            return {"url": url, "row": f"confirmation {shown}"}
    return None


def _end_text(ctx: ToolContext, text: str) -> None:
    if ctx.steps is not None:
        ctx.steps.end(STEP, status="succeeded", output=text)
