"""The JavaScript clients the suite drives install from the lock file and load."""

from __future__ import annotations

from node_clients import run_node


async def test_pinned_clients_load_with_the_entry_points_the_tests_use() -> None:
    exported = await run_node("imports.mjs")
    assert {"readUIMessageStream", "DefaultChatTransport", "streamText"} <= set(exported["ai"])
    assert "createOpenAI" in exported["@ai-sdk/openai"]
    assert "createAnthropic" in exported["@ai-sdk/anthropic"]
    assert "HttpAgent" in exported["@ag-ui/client"]
    assert "EventType" in exported["@ag-ui/core"]
