"""The Messages-API stand-in, driven by the official anthropic SDK over real HTTP."""

from __future__ import annotations

import json
import re
import time

import anthropic
import pytest

TICKET = "From alice.martin@example.com: I want a refund for ORD-1001 please."


def _create(client, tools, text=TICKET, **kwargs):
    return client.messages.create(
        model="claude-sandbox",
        max_tokens=1024,
        tools=tools,
        messages=[{"role": "user", "content": text}],
        **kwargs,
    )


def test_non_streaming_reply_is_a_text_then_one_tool_use(anthropic_client, triage_tools):
    message = _create(anthropic_client, triage_tools)
    assert re.fullmatch(r"msg_[A-Za-z0-9]{24}", message.id)
    assert message.stop_reason == "tool_use" and message.role == "assistant"
    text, tool = message.content
    assert text.type == "text" and "look up" in text.text
    assert tool.type == "tool_use" and re.fullmatch(r"toolu_[A-Za-z0-9]{24}", tool.id)
    assert (tool.name, tool.input) == ("lookup_customer", {"email": "alice.martin@example.com"})
    assert message.usage.input_tokens > 50 and message.usage.output_tokens > 0


def test_tool_use_ids_are_random_not_derived_from_the_request(anthropic_client, triage_tools):
    ids = {_create(anthropic_client, triage_tools).content[1].id for _ in range(3)}
    assert len(ids) == 3


def test_input_tokens_grow_with_the_request(anthropic_client, triage_tools):
    short = _create(anthropic_client, triage_tools).usage.input_tokens
    long = _create(
        anthropic_client, triage_tools, text=TICKET + " padding" * 400
    ).usage.input_tokens
    assert long - short == pytest.approx(len(" padding" * 400) / 4, rel=0.1)


def test_stream_helper_yields_text_in_chunks_and_the_same_final_message(
    anthropic_client, triage_tools
):
    with anthropic_client.messages.stream(
        model="claude-sandbox",
        max_tokens=1024,
        tools=triage_tools,
        messages=[{"role": "user", "content": TICKET}],
    ) as stream:
        chunks = list(stream.text_stream)
        final = stream.get_final_message()
    assert len(chunks) >= 2 and "".join(chunks) == final.content[0].text
    assert final.content[1].input == {"email": "alice.martin@example.com"}
    assert final.stop_reason == "tool_use" and final.usage.output_tokens > 1


def test_raw_stream_has_the_anthropic_event_sequence(anthropic_client, triage_tools):
    events = list(_create(anthropic_client, triage_tools, stream=True))
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    assert kinds.count("content_block_start") == kinds.count("content_block_stop") == 2
    deltas = [e.delta for e in events if e.type == "content_block_delta"]
    json_parts = [d.partial_json for d in deltas if d.type == "input_json_delta"]
    assert len([d for d in deltas if d.type == "text_delta"]) >= 2
    assert len([p for p in json_parts if p]) >= 2
    assert json.loads("".join(json_parts)) == {"email": "alice.martin@example.com"}
    message_delta = events[-2]
    assert message_delta.delta.stop_reason == "tool_use" and message_delta.usage.output_tokens > 0


def test_sse_wire_format_includes_event_lines_and_ping(sandbox, triage_tools):
    body = {
        "model": "m",
        "max_tokens": 10,
        "stream": True,
        "tools": triage_tools,
        "messages": [{"role": "user", "content": TICKET}],
    }
    reply = sandbox.post("/v1/messages", body, headers={"x-api-key": "k"})
    assert reply.status == 200 and reply.headers["content-type"].startswith("text/event-stream")
    frames = [f for f in reply.text.split("\n\n") if f]
    names = [f.split("\n")[0] for f in frames]
    assert names[:3] == ["event: message_start", "event: content_block_start", "event: ping"]
    for frame in frames:
        event_line, data_line = frame.split("\n")
        assert json.loads(data_line.removeprefix("data: "))["type"] == event_line.removeprefix(
            "event: "
        )


def test_requests_without_a_key_or_with_bad_bodies_get_api_errors(sandbox):
    assert (
        sandbox.post("/v1/messages", {"model": "m", "max_tokens": 5, "messages": []}).json()[
            "error"
        ]["type"]
        == "authentication_error"
    )
    reply = sandbox.post(
        "/v1/messages",
        {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        headers={"x-api-key": "k"},
    )
    assert reply.status == 400 and reply.json() == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": reply.json()["error"]["message"]},
    }


def test_a_tool_use_without_its_result_is_rejected_like_the_real_api(
    anthropic_client, triage_tools
):
    messages = [
        {"role": "user", "content": TICKET},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "toolu_x", "name": "lookup_customer", "input": {}}
            ],
        },
        {"role": "user", "content": "hello?"},
    ]
    with pytest.raises(anthropic.BadRequestError) as raised:
        anthropic_client.messages.create(
            model="m", max_tokens=10, tools=triage_tools, messages=messages
        )
    assert "tool_result" in str(raised.value)


def test_a_thinking_reply_is_streamed_signed_and_only_taken_back_unchanged(
    anthropic_client, triage_tools
):
    """[[sandbox:thinking]]: as a model that thinks by default (Claude Sonnet 5)."""
    text = TICKET + " [[sandbox:thinking]]"
    with anthropic_client.messages.stream(
        model="claude-sandbox",
        max_tokens=1024,
        tools=triage_tools,
        messages=[{"role": "user", "content": text}],
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert "thinking" in kinds and "signature" in kinds  # the SDK's events for the two deltas
    thought, said, tool = final.content
    assert thought.type == "thinking" and thought.thinking and thought.signature
    assert (said.type, tool.type) == ("text", "tool_use")
    assistant = [block.model_dump(exclude_none=True) for block in final.content]

    def next_call(blocks):
        return anthropic_client.messages.create(
            model="claude-sandbox",
            max_tokens=1024,
            tools=triage_tools,
            messages=[
                {"role": "user", "content": text},
                {"role": "assistant", "content": blocks},
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": tool.id, "content": "{}"}],
                },
            ],
        )

    assert next_call(assistant).content[0].type == "thinking"  # sent back whole: accepted
    changed = {**assistant[0], "thinking": assistant[0]["thinking"] + " (edited)"}
    unsigned = {**assistant[0], "signature": ""}
    for block, why in ((changed, "Invalid `signature`"), (unsigned, "signature: Field required")):
        with pytest.raises(anthropic.BadRequestError) as raised:
            next_call([block, *assistant[1:]])
        assert why in str(raised.value)


def test_a_model_since_claude_4_6_refuses_a_prefill_and_goes_on_when_asked(
    anthropic_client, triage_tools
):
    text = TICKET + " [[sandbox:max_tokens]]"
    first = _create(anthropic_client, triage_tools, text=text)
    assert first.stop_reason == "max_tokens"
    cut = {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]}

    def call(model, *after):
        return anthropic_client.messages.create(
            model=model,
            max_tokens=1024,
            tools=triage_tools,
            messages=[{"role": "user", "content": text}, cut, *after],
        )

    assert call("claude-haiku-4-5").stop_reason == "tool_use"  # prefill: went on
    for model in ("claude-opus-4-6", "claude-sonnet-5", "claude-fable-5-1"):
        with pytest.raises(anthropic.BadRequestError) as raised:
            call(model)
        assert "must end with a user message" in str(raised.value)
    go_on = {"role": "user", "content": "(Your reply was cut off before it was finished. Go on.)"}
    went_on = call("claude-sonnet-5", go_on)
    # Read as "go on" (the ticket is still the turn): the first step of the
    # ticket, not another cut reply or an answer to the prompt.
    assert went_on.stop_reason == "tool_use" and went_on.content[1].name == "lookup_customer"


def test_an_empty_message_is_refused_but_a_final_empty_assistant_one_is_not(
    anthropic_client, triage_tools
):
    def call(*messages):
        return anthropic_client.messages.create(
            model="claude-haiku-4-5", max_tokens=10, tools=triage_tools, messages=list(messages)
        )

    asked = {"role": "user", "content": TICKET}
    with pytest.raises(anthropic.BadRequestError) as raised:
        call(asked, {"role": "assistant", "content": []}, {"role": "user", "content": "go on"})
    assert "must have non-empty content" in str(raised.value)
    assert call(asked, {"role": "assistant", "content": []}).stop_reason  # answered


def test_model_requests_are_counted_by_outcome(sandbox, anthropic_client, triage_tools):
    _create(anthropic_client, triage_tools)
    _create(anthropic_client, [], text="thanks!")
    with anthropic_client.messages.stream(
        model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
    ) as stream:
        stream.until_done()
    counts = sandbox.stats()["model_requests"]
    assert counts["by_outcome"] == {"tool_use": 1, "end_turn": 2}
    assert counts["by_mode"] == {"non_stream": 2, "stream": 1}


def test_a_request_completed_again_is_a_call_paid_twice(sandbox, anthropic_client, triage_tools):
    before = time.time()
    _create(anthropic_client, triage_tools)
    _create(anthropic_client, [], text="thanks!")
    assert sandbox.get("/_model_repeats").json()["repeats"] == []
    with anthropic_client.messages.stream(  # the first request again, streamed: same request
        model="m", max_tokens=10, tools=triage_tools, messages=[{"role": "user", "content": TICKET}]
    ) as stream:
        stream.until_done()
    (repeat,) = sandbox.get("/_model_repeats").json()["repeats"]
    assert before <= repeat["lost_at"] <= repeat["at"] <= time.time()
    assert repeat["lost_by"] == "127.0.0.1"  # the address the lost answer went to


def test_count_tokens(anthropic_client):
    result = anthropic_client.messages.count_tokens(
        model="m", messages=[{"role": "user", "content": "x" * 400}]
    )
    assert result.input_tokens > 100


def test_chunk_delay_option_paces_the_stream(start_sandbox):
    sandbox = start_sandbox("--model-chunk-delay-ms", "40")
    client = anthropic.Anthropic(api_key="k", base_url=sandbox.url, max_retries=0)
    body = {
        "model": "m",
        "max_tokens": 10,
        "messages": [{"role": "user", "content": "one two three four five six seven"}],
    }
    started = time.monotonic()
    with client.messages.stream(**body) as stream:
        chunks = list(stream.text_stream)
    assert len(chunks) >= 2
    assert time.monotonic() - started >= len(chunks) * 0.04


def test_model_pace_sets_the_time_to_first_token_and_tokens_per_second(
    sandbox, anthropic_client, triage_tools
):
    """POST /_model_pace: the stand-in answers at a real model's pace. Lower
    bounds only (the server sleeps at least this long); /_reset restores it."""
    assert sandbox.post("/_model_pace", {"ttft_ms": 400, "tokens_per_s": 50}).json() == {
        "ttft_ms": 400,
        "tokens_per_s": 50.0,
    }
    started = time.monotonic()
    with anthropic_client.messages.stream(
        model="claude-sandbox",
        max_tokens=1024,
        tools=triage_tools,
        messages=[{"role": "user", "content": TICKET}],
    ) as stream:
        first = None
        for _ in stream.text_stream:
            first = first or time.monotonic() - started
        final = stream.get_final_message()
    total = time.monotonic() - started
    assert first is not None and first >= 0.4
    # Every output token costs 1/50 s after the first one arrived.
    assert total - first >= (final.usage.output_tokens - 10) / 50 * 0.5

    refused = sandbox.post("/_model_pace", {"ttft_ms": -1})
    assert refused.status == 400 and "ttft_ms" in refused.text
    sandbox.post("/_reset", {})
    assert sandbox.get("/_model_pace").json() == {"ttft_ms": 0, "tokens_per_s": 0.0}
