"""Carrier profiles for tests, loaded into workers with
`--include tests.capabilities.browser_profiles`: one whose claim form names
no check (the in-doubt test), one with a small action budget."""

from __future__ import annotations

import dataclasses

from capabilities.browser.config import BrowserConfig
from capabilities.browser.profiles import CARRIER, carrier_profile
from capabilities.browser.tools import browser_tools
from capabilities.connectors import SUPPORT_TOOLS
from capabilities.registry import register_profile

UNCHECKED = "carrier_unchecked"
BUDGETED = "carrier_budgeted"
MAX_ACTIONS = 3


def _register(name: str, config: BrowserConfig) -> None:
    tools = SUPPORT_TOOLS + browser_tools(config)
    register_profile(dataclasses.replace(carrier_profile(), name=name, tools=tools))


_register(UNCHECKED, dataclasses.replace(CARRIER, checks=()))
_register(BUDGETED, dataclasses.replace(CARRIER, max_actions_per_turn=MAX_ACTIONS))
