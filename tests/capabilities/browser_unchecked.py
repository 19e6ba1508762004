"""The carrier profile with no check for its claim form, for the in-doubt
test: workers load it with `--include tests.capabilities.browser_unchecked`."""

from __future__ import annotations

import dataclasses

from capabilities.browser.profiles import CARRIER, carrier_profile
from capabilities.browser.tools import browser_tools
from capabilities.connectors import SUPPORT_TOOLS
from capabilities.registry import register_profile

PROFILE = "carrier_unchecked"

register_profile(
    dataclasses.replace(
        carrier_profile(),
        name=PROFILE,
        tools=SUPPORT_TOOLS + browser_tools(dataclasses.replace(CARRIER, checks=())),
    )
)
