"""The browser tools a profile may offer, built for its BrowserConfig.

browser_open(url), browser_read(), browser_click(target), browser_fill(field,
value | fields), browser_submit(form), browser_screenshot(). Each action is
one step (actions.py): its state is sealed in Postgres and its event (URL,
what was read, a thumbnail, refused requests) written before the model sees
the result.
"""

from __future__ import annotations

import functools
from typing import Any

from agents.tools.base import Kind, Tool, ToolContext, ToolError, ToolOutput
from capabilities.browser import actions, page, submit
from capabilities.browser.config import BrowserConfig

NAMES = (
    "browser_open",
    "browser_read",
    "browser_click",
    "browser_fill",
    "browser_submit",
    "browser_screenshot",
)
_TEXT = {"type": "string", "minLength": 1, "maxLength": 300}


def browser_tools(config: BrowserConfig) -> tuple[Tool, ...]:
    def tool(name, description, schema, run, kind=Kind.READ_ONLY, **extra) -> Tool:
        schema = {"type": "object", "additionalProperties": False, **schema}
        bound = functools.partial(run, config)
        return Tool(name, description, schema, kind, bound, timeout_s=90.0, **extra)

    return (
        tool(
            "browser_open",
            "Open a URL in this session's browser (only the profile's sites are "
            "reachable) and read the page.",
            {"properties": {"url": {"type": "string", "maxLength": 2000}}, "required": ["url"]},
            _open,
        ),
        tool("browser_read", "Read the current page: its text, forms and links.", {}, _read),
        tool(
            "browser_click",
            "Click a link or button by its visible text (a button that submits a form "
            "that changes something is refused: use browser_submit).",
            {"properties": {"target": _TEXT}, "required": ["target"]},
            _click,
            # Clicks that would change something are refused (side-effect
            # forms go through browser_submit); a click again after a crash
            # starts from the last stored page.
            Kind.IDEMPOTENT_BY_KEY,
        ),
        tool(
            "browser_fill",
            "Fill form fields by name or label: either `field` and `value`, or "
            "`fields` {name: value}. `${secret:NAME}` fills a stored secret.",
            {
                "properties": {
                    "field": _TEXT,
                    "value": {"type": "string", "maxLength": 5000},
                    "fields": {
                        "type": "object",
                        "additionalProperties": {"type": "string", "maxLength": 5000},
                        "maxProperties": 20,
                    },
                },
            },
            _fill,
            Kind.IDEMPOTENT_BY_KEY,  # filling again writes the same values
        ),
        submit.submit_tool(tool),
        tool(
            "browser_screenshot",
            "Take a screenshot of the current page (shown to people on the desk).",
            {},
            _screenshot,
        ),
    )


def _output(result: actions.Result) -> ToolOutput:
    text, is_error = actions.output(result)
    return ToolOutput(text, is_error=is_error)


def _open(config: BrowserConfig, ctx: ToolContext, arguments: dict[str, Any]) -> ToolOutput:
    url = arguments["url"].strip()

    async def work(slot):
        await page.go(slot.page, url, config.action_timeout_s * 1000)

    result, _, _ = actions.act(config, ctx, "open", {"url": url}, work)
    return _output(result)


def _read(config: BrowserConfig, ctx: ToolContext, arguments: dict[str, Any]) -> ToolOutput:
    async def work(slot):
        return None

    result, _, _ = actions.act(config, ctx, "read", {}, work)
    return _output(result)


def _click(config: BrowserConfig, ctx: ToolContext, arguments: dict[str, Any]) -> ToolOutput:
    target = arguments["target"]

    async def work(slot):
        await page.click(slot, target, config, config.action_timeout_s * 1000)

    result, _, _ = actions.act(config, ctx, "click", {"target": target}, work)
    return _output(result)


def _fill(config: BrowserConfig, ctx: ToolContext, arguments: dict[str, Any]) -> ToolOutput:
    fields = dict(arguments.get("fields") or {})
    if "field" in arguments:
        fields[arguments["field"]] = arguments.get("value", "")
    if not fields:
        raise ToolError("say which field to fill: `field` and `value`, or `fields`")

    async def work(slot):
        return {"filled": await page.fill(slot, fields, config.action_timeout_s * 1000)}

    # Values as given: a secret stays `${secret:NAME}` on the desk.
    result, _, _ = actions.act(config, ctx, "fill", {"fields": fields}, work)
    return _output(result)


def _screenshot(config: BrowserConfig, ctx: ToolContext, arguments: dict[str, Any]) -> ToolOutput:
    async def work(slot):
        return None

    result, _, _ = actions.act(config, ctx, "screenshot", {}, work, shot_quality=60)
    return ToolOutput(
        f"Screenshot taken of {result.snap['url']} ({result.snap['title'][:100]!r}); "
        "people see it on the desk."
    )
