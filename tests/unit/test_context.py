"""The built-in compressor's cuts and summaries, the window lookup, and which arguments an engine's
``compress`` gets (hermesd.context.compressor, hermesd.model.context_length,
hermesd.context.host). Pure functions and one engine instance: no daemon needed."""

from __future__ import annotations

import json
from typing import Any

import pytest

from hermesd.context.compressor import (
    SUMMARY_PREFIX,
    BuiltinCompressor,
    CompressionSettings,
    SummaryFailed,
    estimate_tokens,
    threshold_tokens,
)
from hermesd.context.fit import fit_request
from hermesd.context.host import supported_kwargs
from hermesd.model.context_length import from_listing, from_ollama_show, from_props, from_table
from hermesd.store.history import repair_history


def _call(call_id: str, path: str) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": "read_file", "arguments": json.dumps({"path": path})},
    }


def _conversation(turns: int) -> list[dict[str, Any]]:
    """Turns of: a question, a tool call, its result (an error every third), an answer."""
    out: list[dict[str, Any]] = []
    for i in range(turns):
        out.append({"role": "user", "content": f"ask {i} " + "u" * 400})
        out.append(
            {"role": "assistant", "content": None, "tool_calls": [_call(f"c{i}", f"/srv/f{i}.txt")]}
        )
        result = json.dumps({"error": f"no such file {i}"}) if i % 3 == 0 else "r" * 400
        out.append({"role": "tool", "tool_call_id": f"c{i}", "content": result})
        out.append({"role": "assistant", "content": f"answer {i} " + "a" * 400})
    return out


def _engine(summary: str | Exception = "the summary", **settings: Any) -> BuiltinCompressor:
    def summarize(messages: list[dict[str, Any]], max_tokens: int) -> str:
        if isinstance(summary, Exception):
            raise summary
        return summary

    engine = BuiltinCompressor(CompressionSettings(protect_last_n=4, **settings), summarize)
    engine.update_model("m", 8000)
    return engine


def test_the_threshold_follows_the_reference_rule() -> None:
    assert threshold_tokens(1_000_000, 0.5) == (0.5, 500_000)
    assert threshold_tokens(200_000, 0.5) == (0.75, 150_000)  # under 512K: at least 75%
    assert threshold_tokens(100_000, 0.5) == (0.75, 75_000)
    assert threshold_tokens(8_000, 0.5) == (0.75, 6_800)  # the 64K floor is the window: 85%


def test_the_middle_becomes_one_summary_and_no_tool_call_loses_its_result() -> None:
    engine = _engine()
    messages = _conversation(12)
    out = engine.compress(messages)
    assert out[:3] == messages[:3]  # protect_first_n
    summary = out[3]
    assert summary["content"].startswith(SUMMARY_PREFIX) and "the summary" in summary["content"]
    assert out[-1] == messages[-1]
    assert repair_history(out) == out  # every call answered, no stray result
    assert out[4]["role"] != "tool"
    assert engine.compression_count == 1 and engine.last_prompt_tokens == -1
    assert estimate_tokens(out) < estimate_tokens(messages) * 0.75


def test_a_failed_summary_is_replaced_by_a_record_of_the_window() -> None:
    engine = _engine(RuntimeError("model down"))
    out = engine.compress(_conversation(12))
    text = out[3]["content"]
    assert text.startswith(SUMMARY_PREFIX)
    assert "ask 4 " in text  # the user's asks
    assert "read_file(" in text and "/srv/f4.txt" in text  # tool calls and paths
    assert "no such file 3" in text  # tool errors
    assert engine.last_summary_error == "RuntimeError: model down"


def test_abort_on_summary_failure_raises_and_keeps_nothing() -> None:
    engine = _engine(RuntimeError("model down"), abort_on_summary_failure=True)
    with pytest.raises(SummaryFailed):
        engine.compress(_conversation(12))
    assert engine.compression_count == 0


def test_focus_and_memory_context_reach_the_summary_request() -> None:
    seen: list[list[dict[str, Any]]] = []
    engine = BuiltinCompressor(
        CompressionSettings(protect_last_n=4), lambda m, n: seen.append(m) or "s"
    )
    engine.update_model("m", 8000)
    engine.compress(_conversation(12), focus_topic="file errors", memory_context="likes tea")
    asked = seen[0][1]["content"]
    assert "file errors" in asked and "likes tea" in asked


def test_a_short_conversation_is_left_alone() -> None:
    engine = _engine()
    messages = _conversation(1)
    assert engine.compress(messages) == messages
    assert not engine.has_content_to_compress(messages)


def test_the_window_is_read_from_each_kind_of_models_listing() -> None:
    vllm = {"data": [{"id": "m", "max_model_len": 32768}]}
    openrouter = {"data": [{"id": "x"}, {"id": "m", "context_length": 200000}]}
    llamacpp = {"data": [{"id": "any.gguf", "meta": {"n_ctx_train": 131072, "n_ctx": 8192}}]}
    bare = {"data": [{"id": "m"}, {"id": "n"}]}
    assert from_listing(vllm, "m") == 32768
    assert from_listing(openrouter, "m") == 200000
    assert from_listing(llamacpp, "m") == 8192
    assert from_listing(bare, "m") is None
    assert from_listing("garbage", "m") is None
    assert from_table("openai/gpt-4o-mini") == 128_000
    assert from_table("my-own-model") is None


def test_compress_gets_only_the_arguments_its_signature_names() -> None:
    def old(messages: Any, current_tokens: Any = None) -> Any: ...
    def new(
        messages: Any,
        current_tokens: Any = None,
        focus_topic: Any = None,
        force: bool = False,
        memory_context: str = "",
    ) -> Any: ...
    def loose(messages: Any, **kwargs: Any) -> Any: ...

    args = {"current_tokens": 5, "focus_topic": "f", "force": True, "memory_context": "m"}
    assert supported_kwargs(old, **args) == {"current_tokens": 5}
    assert supported_kwargs(new, **args) == args
    assert supported_kwargs(loose, **args) == args
    assert "memory_context" not in supported_kwargs(loose, **{**args, "memory_context": ""})


def _long_turns(turns: int, chars: int = 2000) -> list[dict[str, Any]]:
    """A system prompt, then turns of a long question, a tool call with a long result, an
    answer."""
    out: list[dict[str, Any]] = [{"role": "system", "content": "be brief"}]
    for turn in _conversation(turns):
        out.append({**turn, "content": turn["content"] + "z" * chars} if turn["content"] else turn)
    return out


def test_a_small_window_protects_only_the_newest_user_message() -> None:
    engine = _engine()
    engine.update_model("m", 3000)  # threshold 2,550: three long head messages fill half of it
    messages = _long_turns(3)
    messages.append({"role": "user", "content": "the newest question " + "q" * 2000})
    out = engine.compress(messages)
    assert [m["role"] for m in out] == ["system", "assistant", "user"]  # roles alternate
    assert out[1]["content"].startswith(SUMMARY_PREFIX)
    assert out[-1] == messages[-1]
    roomy = _engine()  # 8,000: the usual head and tail stay
    out = roomy.compress(_conversation(12))
    assert out[:3] == _conversation(12)[:3]


def test_a_lone_summary_is_not_summarised_again() -> None:
    engine = _engine()
    engine.update_model("m", 3000)
    summary = {"role": "user", "content": SUMMARY_PREFIX + " earlier " + "s" * 3000}
    messages = [{"role": "system", "content": "x"}, summary, {"role": "user", "content": "q"}]
    assert engine.compress(messages) == messages
    assert not engine.has_content_to_compress(messages)


def test_the_summary_request_fits_the_window_of_the_model_that_writes_it() -> None:
    seen: list[list[dict[str, Any]]] = []
    engine = BuiltinCompressor(
        CompressionSettings(protect_last_n=4), lambda m, n: seen.append(m) or "s"
    )
    engine.update_model("m", 3000)
    engine.compress([*_long_turns(40, 4000), {"role": "user", "content": "now"}])
    assert estimate_tokens(seen[0]) <= 3000 - 300 - 256  # the answer's share and max_tokens
    assert "older messages left out to fit the window" in seen[0][1]["content"]
    other = BuiltinCompressor(
        CompressionSettings(), lambda m, n: seen.append(m) or "s", summary_window=False
    )  # another summary model: its own window
    other.update_model("m", 3000)
    other.compress([*_long_turns(12, 4000), {"role": "user", "content": "now"}])
    assert estimate_tokens(seen[1]) > 3000


def test_a_request_over_the_window_is_cut_to_fit_oldest_first_and_marked() -> None:
    messages = [*_long_turns(6), {"role": "user", "content": "the question " + "q" * 1000}]
    fitted = fit_request(messages, None, 3000)
    assert estimate_tokens(fitted.messages) == fitted.tokens <= 2700 and fitted.fits
    assert fitted.messages[0] == messages[0]  # the system prompt
    assert fitted.messages[-1] == messages[-1]  # the newest question, whole
    assert fitted.dropped > 0 and fitted.truncated > 0
    kept = fitted.messages[1:-1]
    assert kept and all("truncated by hermesd" in m["content"] for m in kept if m["content"])
    assert repair_history(fitted.messages) == fitted.messages  # calls travel with results
    assert kept[0]["role"] == "user"  # whole turns left out, the oldest first
    assert "ask 0 " not in str(fitted.messages) and "ask 5 " in str(fitted.messages)
    untouched = fit_request(messages, None, 200_000)
    assert untouched.messages == messages and not untouched.changed


def test_the_running_turn_is_cut_only_when_that_makes_it_fit() -> None:
    question = {"role": "user", "content": "read it " + "q" * 400}
    call = {"role": "assistant", "content": None, "tool_calls": [_call("c1", "/f")]}
    result = {"role": "tool", "tool_call_id": "c1", "content": "r" * 12_000}
    messages = [{"role": "system", "content": "s"}, question, call, result]
    fitted = fit_request(messages, None, 3000)
    assert fitted.fits and fitted.messages[1] == question
    assert "truncated by hermesd to fit the model's 3,000-token window" in str(
        fitted.messages[3]["content"]
    )
    tools = [{"type": "function", "function": {"name": "t", "description": "d" * 14_000}}]
    hopeless = fit_request(messages, tools, 3000)  # the tool list alone is over the window
    assert not hopeless.fits and hopeless.messages == messages and hopeless.tool_tokens > 3000


def test_the_window_is_read_from_llama_cpp_props_and_ollama_show() -> None:
    assert from_props({"default_generation_settings": {"n_ctx": 4096}}) == 4096
    assert from_props({"default_generation_settings": {}}) is None
    assert from_props("nonsense") is None
    info = {"general.architecture": "llama", "llama.context_length": 131072}
    assert from_ollama_show({"model_info": info}) == 131072
    assert from_ollama_show({"model_info": info, "parameters": "num_ctx 8192\ntop_k 40"}) == 8192
    assert from_ollama_show({"parameters": "num_ctx lots"}) is None
    assert from_ollama_show([]) is None
