"""Realistic call corpora: what a voice call puts on the wire, mostly LLM text deltas.

Deterministic (a seeded generator), so every run measures the same messages.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

__all__ = [
    "brisvox_agent_corpus",
    "brisvox_server_corpus",
    "ovp_client_corpus",
    "ovp_server_corpus",
]

WORDS = [
    "we",
    "open",
    "at",
    "noon",
    "on",
    "sundays",
    "and",
    "close",
    "at",
    "six",
    "the",
    "kitchen",
    "takes",
    "orders",
    "until",
    "five",
    "thirty",
    "your",
    "table",
    "for",
    "four",
    "is",
    "booked",
    "under",
    "the",
    "name",
    "rossi",
    "would",
    "you",
    "like",
    "anything",
    "else",
    "today",
]


def _text(rng: random.Random, low: int, high: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high)))


def _mix(
    rng: random.Random, table: list[tuple[int, Callable[[int], dict[str, Any]]]], size: int
) -> list[str]:
    builders = [build for weight, build in table for _ in range(weight)]
    return [json.dumps(rng.choice(builders)(i), separators=(",", ":")) for i in range(1, size + 1)]


def brisvox_server_corpus(size: int = 2000, seed: int = 1) -> list[str]:
    """Server-to-agent messages of a call: deltas, TTS chunks, transcripts, turns, tool calls."""
    rng = random.Random(seed)

    def env(i: int) -> dict[str, Any]:
        return {"seq": i, "t_ms": i * 37}

    table: list[tuple[int, Callable[[int], dict[str, Any]]]] = [
        (50, lambda i: {"type": "bot.text", **env(i), "epoch": i // 40, "text": " " + rng.choice(WORDS)}),
        (14, lambda i: {"type": "bot.tts_text", **env(i), "epoch": i // 40, "text": _text(rng, 3, 9)}),
        (10, lambda i: {"type": "user.transcript", **env(i), "text": _text(rng, 2, 12), "final": rng.random() < 0.3}),
        (4, lambda i: {"type": "user.text", **env(i), "epoch": i // 40, "text": _text(rng, 4, 16)}),
        (8, lambda i: {"type": rng.choice(["turn.user_started", "turn.user_ended", "turn.bot_started", "turn.bot_ended", "bot.llm_started", "bot.tts_stopped"]), **env(i), "epoch": i // 40}),
        (3, lambda i: {"type": "bot.llm_stopped", **env(i), "epoch": i // 40, "usage": {"input_tokens": 1820, "cached_input_tokens": 1024, "output_tokens": 42}}),
        (2, lambda i: {"type": "turn.metrics", **env(i), "epoch": i // 40, "metrics": {"end_of_turn_ms": 310, "stt_final_ms": 122, "llm_ttft_ms": 402, "tts_ttfb_ms": 168, "response_ms": 905}}),
        (2, lambda i: {"type": "tool.call", **env(i), "id": i, "call_id": f"call_{i}", "name": "book_table", "arguments": {"time": "19:30", "party_size": 4}, "kind": "side_effect", "epoch": i // 40, "idempotency_key": f"{i:016x}", "timeout_ms": 4000}),
        (2, lambda i: {"type": "command.result", **env(i), "id": f"c{i}", "ok": True}),
        (1, lambda i: {"type": "events.lost", **env(i), "count": 3}),
        (1, lambda i: {"type": "session.start", **env(i), "protocol": "brisvox.agent", "versions": [1], "session_id": "42", "agent": "luigi", "capabilities": {"transfer": True, "tools": True}}),
    ]  # fmt: skip
    return _mix(rng, table, size)


def brisvox_agent_corpus(size: int = 2000, seed: int = 2) -> list[str]:
    """Agent-to-server messages: lines, tool results, context updates, the handshake."""
    rng = random.Random(seed)
    table: list[tuple[int, Callable[[int], dict[str, Any]]]] = [
        (40, lambda i: {"type": "say", "id": f"c{i}", "re": i, "text": _text(rng, 4, 20)}),
        (30, lambda i: {"type": "tool.result", "id": i, "result": {"status": "booked", "table": rng.randint(1, 30)}}),
        (15, lambda i: {"type": "context.update", "id": f"c{i}", "append": [{"role": "system", "text": _text(rng, 5, 15)}]}),
        (10, lambda i: {"type": "tools.set", "id": f"c{i}", "enabled": ["book_table", "opening_hours"]}),
        (5, lambda i: {"type": "session.accept", "version": 1, "tools": [{"name": "book_table", "description": "Books a table.", "parameters": {"type": "object", "properties": {"time": {"type": "string"}}, "required": ["time"]}, "kind": "side_effect", "timeout_ms": 4000}], "events": ["user.text", "turn.bot_ended"]}),
    ]  # fmt: skip
    return _mix(rng, table, size)


def _ovp_env(i: int) -> dict[str, Any]:
    return {
        "seq": i,
        "ts": f"2026-05-14T12:{i // 600 % 60:02d}:{i // 10 % 60:02d}.{i % 10}00Z",
        "session_id": "ovps_01HZK3M8Q2W7R4T6Y9B1C5D8E0",
    }


def ovp_server_corpus(size: int = 2000, seed: int = 3) -> list[str]:
    """Gateway-to-client events: thinking deltas, transcripts, audio metadata, observability."""
    rng = random.Random(seed)
    table: list[tuple[int, Callable[[int], dict[str, Any]]]] = [
        (50, lambda i: {"type": "agent.thinking", **_ovp_env(i), "turn_id": f"turn_{i // 40}", "delta": " " + rng.choice(WORDS)}),
        (12, lambda i: {"type": "transcript.partial", **_ovp_env(i), "utterance_id": f"utt_{i // 20}", "speaker": "caller", "text": _text(rng, 2, 10)}),
        (5, lambda i: {"type": "transcript.final", **_ovp_env(i), "utterance_id": f"utt_{i // 20}", "speaker": "caller", "language": "en-US", "text": _text(rng, 4, 12), "confidence": 0.94, "words": [{"word": "what", "start_ms": 0, "end_ms": 220, "confidence": 0.96}, {"word": "time", "start_ms": 220, "end_ms": 470, "confidence": 0.93}]}),
        (10, lambda i: {"type": "audio.egress", **_ovp_env(i), "utterance_id": f"utt_{i // 20}", "bytes_sent": 640 * i, "final": False}),
        (6, lambda i: {"type": "agent.output", **_ovp_env(i), "turn_id": f"turn_{i // 40}", "text": _text(rng, 6, 20), "final": True}),
        (4, lambda i: {"type": "call.quality.update", **_ovp_env(i), "packet_loss_pct": 0.2, "jitter_ms": 4.1, "rtt_ms": 38.0, "mos": 4.3}),
        (4, lambda i: {"type": "agent.cost.tick", **_ovp_env(i), "total_cost_usd_micros": 1200 + i, "breakdown": {"llm_usd_micros": 700, "stt_usd_micros": 200, "tts_usd_micros": 250, "voice_termination_usd_micros": 50}}),
        (3, lambda i: {"type": "agent.latency.breakdown", **_ovp_env(i), "turn_id": f"turn_{i // 40}", "stt_first_token_ms": 89, "stt_final_ms": 240, "llm_first_token_ms": 312, "llm_final_ms": 980, "tts_first_byte_ms": 132, "total_turn_ms": 1452}),
        (3, lambda i: {"type": "agent.tool.invoke", **_ovp_env(i), "turn_id": f"turn_{i // 40}", "tool_call_id": f"tc_{i}", "name": "lookup_order", "arguments": {"order_id": "ord_12345"}}),
        (3, lambda i: {"type": "agent.tool.result", **_ovp_env(i), "turn_id": f"turn_{i // 40}", "tool_call_id": f"tc_{i}", "result": {"status": "shipped", "carrier": "UPS"}, "duration_ms": 412}),
    ]  # fmt: skip
    return _mix(rng, table, size)


def ovp_client_corpus(size: int = 2000, seed: int = 4) -> list[str]:
    """Client-to-gateway events: inputs, updates, handoff, DTMF."""
    rng = random.Random(seed)
    table: list[tuple[int, Callable[[int], dict[str, Any]]]] = [
        (40, lambda i: {"type": "agent.input", **_ovp_env(i), "source": "developer_inject", "text": _text(rng, 4, 16)}),
        (20, lambda i: {"type": "session.update", **_ovp_env(i), "patch": {"voice_id": "cartesia_voice_xyz", "language": "es-ES"}}),
        (20, lambda i: {"type": "dtmf.send", **_ovp_env(i), "digits": "4021#"}),
        (20, lambda i: {"type": "agent.cancel", **_ovp_env(i)}),
    ]  # fmt: skip
    return _mix(rng, table, size)
