"""The stream renamer: every ``"model"`` field of every event set to the client's name, the
rest of the bytes unchanged, however the engine's bytes are cut into chunks; the learned fast
path (``bytes.replace`` of the engine's exact field) gives what the expression gives."""

from __future__ import annotations

import pytest

from obleth.gateway.relay import _MODEL_FIELD, _StreamRenamer, model_replacement

CLIENT = "team/llama-3"


def event(model: str, content: str = "hi") -> bytes:
    return (
        b'data: {"id":"c1","object":"chat.completion.chunk","model":"'
        + model.encode()
        + b'","choices":[{"delta":{"content":"'
        + content.encode()
        + b'"}}]}\n\n'
    )


def expected(data: bytes) -> bytes:
    """What the expression alone makes of the whole stream (the renamer's contract)."""
    return _MODEL_FIELD.sub(model_replacement(CLIENT), data)


def relay(chunks: list[bytes]) -> bytes:
    renamer = _StreamRenamer(CLIENT)
    return b"".join(renamer.feed(c) for c in chunks) + renamer.flush()


STREAMS = {
    "one model, an event a chunk": [event("/models/smollm2.gguf") for _ in range(5)],
    "the engine changes its id mid-stream": [event("a"), event("a"), event("b"), event("a")],
    "two ids in one chunk": [event("a") + event("b"), event("a")],
    "generated text quoting a model field": [
        event("a"),
        event("a", r"say \"model\":\"a\" please"),
        event("a"),
    ],
    "a value holding an escaped quote before model": [event("a"), event(r"x\"model"), event("a")],
    "spaces around the colon": [event("a"), b'data: {"model" :  "a"}\n\n', event("a")],
    "no model field": [b'data: {"choices":[]}\n\n', b"data: [DONE]\n\n"],
    "the done marker after events": [event("a"), event("a"), b"data: [DONE]\n\n"],
    "a name needing JSON escapes": [event('we"ird\\name'), event('we"ird\\name')],
}


@pytest.mark.parametrize("name", list(STREAMS))
@pytest.mark.parametrize("cut", [0, 1, 7, 64])
def test_the_renamer_gives_what_the_expression_gives_however_the_bytes_are_cut(
    name: str, cut: int
) -> None:
    whole = b"".join(STREAMS[name])
    # cut == 0: as the engine wrote them (an event or two a chunk); else every ``cut`` bytes
    cuts = range(0, len(whole), cut) if cut else ()
    chunks = [whole[i : i + cut] for i in cuts] if cut else STREAMS[name]
    assert relay(chunks) == expected(whole)


def test_the_fast_path_is_taken_once_the_field_is_learned() -> None:
    renamer = _StreamRenamer(CLIENT)
    renamer.feed(event("/m.gguf"))
    assert renamer._known == (b'"model":"/m.gguf"', b'"model":"team/llama-3"')
    assert renamer.feed(event("/m.gguf")) == event(CLIENT)
    # a field it has not seen goes through the expression, and is learned in its turn
    assert renamer.feed(event("other")) == event(CLIENT)
    assert renamer._known == (b'"model":"other"', b'"model":"team/llama-3"')
