"""How a recipe's values land in its batch script without ever being run as shell.

The one rule (see also :mod:`recipes`): **a substituted value is data, never code.**

- A value made only of inert characters (letters, digits and ``_ @ % + = : , . / -``) is written
  into the script as it is, wherever its token sits: such text means the same thing in every
  shell context (bare word, double or single quotes, a here-document, ``$(...)``). Every normal
  value (a model id, a folder, a number) is one of these, so the script reads as before.
- Any other value is assigned once, single-quoted (:func:`shell_quote`), to a shell variable at
  the top of the script (``OBLETH_INPUT_<name>``, ``OBLETH_VALUE_API_MODEL_NAME``,
  ``OBLETH_CLUSTER_CACHE``, ...), and the token becomes a reference to that variable. Bash never
  parses the text of an expanded variable again, so ``$(...)``, backticks, ``;``, ``|``, ``&``,
  redirections, quotes and ``${IFS}`` in it stay literal characters.

The reference depends on where the token sits, which :func:`token_contexts` works out with a
small lexer of the script as written (quotes, ``$(...)``, ``${...}``, arithmetic, backticks,
comments, here-documents):

=================  ======================================  ===================================
token sits         reference written                        the program receives
=================  ======================================  ===================================
bare word          ``"${OBLETH_INPUT_x}"``                  the value as one argument
bare, text input   ``"${OBLETH_INPUT_x[@]}"`` (an array)    the words the operator typed, split
                                                             like a shell command line (quotes
                                                             group words) but never expanded
inside ``"..."``   ``${OBLETH_INPUT_x}``                    the value, literally, in that word
inside ``'...'``   ``'"${OBLETH_INPUT_x}"'``                the value, literally, in that word
``$((...))``       refused unless the value is inert        (arithmetic would run ``a[$(..)]``)
``${a[...]}``      refused unless the value is inert        (an index is arithmetic too)
anything else      ``${OBLETH_INPUT_x}``                    the value, literally
=================  ======================================  ===================================

Safety does not rest on the lexer being right: each reference above is a plain parameter
expansion, which bash never parses again, so a wrong guess can at worst split a value into
words or show it as ``${...}`` text, never run it. What no quoting can protect is a recipe that
hands a value to a second parser on purpose: ``eval``, ``bash -c "{{x}}"``, ``ssh host
{{x}}``, or arithmetic the lexer does not see (``let``, ``declare -i``, ``[[ {{x}} -eq 1 ]]``,
which evaluate ``a[$(...)]``). Recipes must not do that (give numbers the ``number`` type, which
only takes numbers), and the canary test (tests/security/test_recipe_canary.py) runs every
library recipe with hostile values to prove they don't.

Refused everywhere (:func:`value_problem`): NUL and other control characters, line breaks
(a value is one line; a newline is how a value would add a command or a ``#SBATCH`` line),
``#SBATCH`` anywhere in a value, and values over :data:`MAX_VALUE_CHARS` characters.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

__all__ = [
    "MAX_VALUE_CHARS",
    "ShellValues",
    "is_inert",
    "shell_quote",
    "token_contexts",
    "value_problem",
]

MAX_VALUE_CHARS = 4096
_INERT_RE = re.compile(r"[A-Za-z0-9_@%+=:,./-]*")
_INERT_WORDS_RE = re.compile(r"[A-Za-z0-9_@%+=:,./-]+(?: +[A-Za-z0-9_@%+=:,./-]+)*")
_CONTROL_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_SBATCH_RE = re.compile(r"#\s*SBATCH", re.IGNORECASE)

BARE, DQ, SQ, ARITH, OTHER = "bare", "dq", "sq", "arith", "other"


def is_inert(value: str) -> bool:
    """True when the text means the same in every shell context (no quoting needed)."""
    return _INERT_RE.fullmatch(value) is not None


def shell_quote(value: str) -> str:
    """POSIX single quotes (``'`` becomes ``'"'"'``); inert text stays as it is."""
    return value if value and is_inert(value) else shlex.quote(value)


def value_problem(value: str) -> str | None:
    """Why a value may not reach a batch script, or None. The text is phrased to follow
    "<field> ..." and ends with the fix."""
    if "\x00" in value:
        return "contains a NUL character: remove it."
    if "\n" in value or "\r" in value:
        return (
            "contains a line break: a value is one line (a new line would start a new command "
            "in the batch script). Remove the line break."
        )
    if _CONTROL_RE.search(value):
        return "contains a control character: use printable text only."
    if _SBATCH_RE.search(value):
        return (
            "contains `#SBATCH`: a value cannot add Slurm directives. Set partition, account, "
            "QoS, GRES or nodes in the deploy form's fields instead."
        )
    if len(value) > MAX_VALUE_CHARS:
        return f"is {len(value)} characters long: use at most {MAX_VALUE_CHARS}."
    return None


# ----------------------------------------------------------------------------- lexer


@dataclass
class _Frame:
    kind: str  # top, cmd, dq, sq, ansi, param, subscript, arith, bq, comment
    depth: int = 0  # open parentheses inside cmd / arith


def _bare_like(stack: list[_Frame], index: int) -> bool:
    """Quote characters work normally at stack[index] (top level, $(...), or ${...} there)."""
    while index >= 0:
        kind = stack[index].kind
        if kind in ("top", "cmd", "comment"):
            return True
        if kind != "param":
            return False
        index -= 1  # ${...} takes the quoting rules of where it sits
    return False


def _context(stack: list[_Frame]) -> str:
    top = stack[-1]
    below_ok = len(stack) > 1 and _bare_like(stack, len(stack) - 2)
    if top.kind in ("top", "cmd", "comment"):
        return BARE
    if top.kind == "param":
        return BARE if _bare_like(stack, len(stack) - 1) else OTHER
    if top.kind == "dq":
        return DQ if below_ok else OTHER
    if top.kind == "sq":
        return SQ if below_ok else OTHER
    if top.kind in ("arith", "subscript"):
        return ARITH
    return OTHER


_WORD_BREAK = frozenset(" \t\n;&|()<>")
_HEREDOC_RE = re.compile(r"<<(-?)[ \t]*(\"[^\"\n]*\"|'[^'\n]*'|\\?[A-Za-z0-9_.+-]+)")


def token_contexts(text: str, token_re: re.Pattern[str]) -> dict[int, str]:
    """The shell context (bare, dq, sq, arith, other) of each ``token_re`` match in ``text``,
    keyed by the match's start offset."""
    result: dict[int, str] = {}
    stack = [_Frame("top")]
    heredocs: list[tuple[str, bool]] = []
    i, n = 0, len(text)
    word_start = True
    while i < n:
        match = token_re.match(text, i)
        if match:
            result[i] = _context(stack)
            i = match.end()
            word_start = False
            continue
        c = text[i]
        nxt = text[i + 1] if i + 1 < n else ""
        top = stack[-1]
        kind = top.kind
        if c == "\n" and heredocs and kind in ("top", "cmd", "comment"):
            if kind == "comment":
                stack.pop()
            i = _skip_heredocs(text, i + 1, heredocs, token_re, result)
            heredocs = []
            word_start = True
            continue
        if kind == "comment":
            if c == "\n":
                stack.pop()
                word_start = True
            i += 1
            continue
        if kind == "sq":
            if c == "'":
                stack.pop()
            i += 1
            continue
        if kind == "ansi":
            if c == "\\":
                i += 2
                continue
            if c == "'":
                stack.pop()
            i += 1
            continue
        if kind == "bq":
            if c == "\\":
                i += 2
                continue
            if c == "`":
                stack.pop()
            i += 1
            continue
        if c == "\\":
            i += 2
            word_start = False
            continue
        # Expansions that open in every remaining context (top, cmd, dq, param, arith).
        if c == "$" and text.startswith("$((", i):
            stack.append(_Frame("arith"))
            i += 3
            continue
        if c == "$" and nxt == "(":
            stack.append(_Frame("cmd"))
            i += 2
            word_start = True
            continue
        if c == "$" and nxt == "{":
            stack.append(_Frame("param"))
            i += 2
            continue
        if c == "`":
            stack.append(_Frame("bq"))
            i += 1
            continue
        if kind == "dq":
            if c == '"':
                stack.pop()
            i += 1
            continue
        if kind == "arith":
            if c == "(":
                top.depth += 1
            elif c == ")":
                if top.depth == 0 and nxt == ")":
                    stack.pop()
                    i += 2
                    continue
                top.depth = max(0, top.depth - 1)
            i += 1
            continue
        if kind == "subscript":  # ${name[...]}: an index is arithmetic
            if c == "]":
                stack.pop()
            i += 1
            continue
        if kind == "param":
            if c == "[":
                stack.append(_Frame("subscript"))
            elif c == "}":
                stack.pop()
            elif c == '"':
                stack.append(_Frame("dq"))
            elif c == "'" and _bare_like(stack, len(stack) - 1):
                stack.append(_Frame("sq"))
            i += 1
            continue
        # top or cmd: a bare context.
        if c == "'":
            stack.append(_Frame("sq"))
        elif c == "$" and nxt == "'":
            stack.append(_Frame("ansi"))
            i += 1
        elif c == '"' or (c == "$" and nxt == '"'):
            stack.append(_Frame("dq"))
            i += 1 if c == "$" else 0
        elif c == "#" and word_start:
            stack.append(_Frame("comment"))
        elif c == "(" and nxt == "(" and word_start:
            stack.append(_Frame("arith"))
            i += 2
            continue
        elif c in "<>" and nxt == "(":
            stack.append(_Frame("cmd"))
            i += 2
            word_start = True
            continue
        elif c == "<" and nxt == "<" and not text.startswith("<<<", i):
            heredoc = _HEREDOC_RE.match(text, i)
            if heredoc:
                # Quoted delimiter or not, the body is OTHER (values land as ${...}).
                word = heredoc.group(2)
                heredocs.append((word.strip("\"'").lstrip("\\"), heredoc.group(1) == "-"))
                i = heredoc.end()
                word_start = False
                continue
        elif c == "(" and kind == "cmd":
            top.depth += 1
        elif c == ")" and kind == "cmd":
            if top.depth == 0:
                stack.pop()
            else:
                top.depth -= 1
        word_start = c in _WORD_BREAK
        i += 1
    return result


def _skip_heredocs(
    text: str,
    i: int,
    heredocs: list[tuple[str, bool]],
    token_re: re.Pattern[str],
    result: dict[int, str],
) -> int:
    """Skip the bodies of pending here-documents from offset ``i``; their tokens are OTHER."""
    for delimiter, strip_tabs in heredocs:
        while i < len(text):
            end = text.find("\n", i)
            end = len(text) if end < 0 else end
            line = text[i:end]
            if (line.lstrip("\t") if strip_tabs else line) == delimiter:
                i = end + 1
                break
            for match in token_re.finditer(line):
                result[i + match.start()] = OTHER
            i = end + 1
    return i


# ----------------------------------------------------------------------------- placement


@dataclass
class ShellValues:
    """The variables a rendered script assigns at its top, and the references to them."""

    arrays: bool = True  # False when the script's shell is not bash (POSIX sh has no arrays)
    assignments: dict[str, str] = field(default_factory=dict)  # variable -> assignment line
    _values: dict[str, str] = field(default_factory=dict)  # variable -> value it holds

    def _variable(self, base: str, value: str, *, words: bool = False) -> str:
        stem = re.sub(r"[^A-Za-z0-9_]", "_", base)
        name, count = stem, 1
        key = f"{value}\x00{'words' if words else 'text'}"
        while name in self._values and self._values[name] != key:
            count += 1
            name = f"{stem}_{count}"
        if name not in self._values:
            self._values[name] = key
            if words:
                items = " ".join(shell_quote(w) for w in shlex.split(value))
                self.assignments[name] = f"{name}=({items})"
            else:
                self.assignments[name] = f"{name}={shell_quote(value)}"
        return name

    def place(self, base: str, value: str, context: str, *, words: bool = False) -> str:
        """The text that stands for ``value`` at a token in ``context``. ``words``: a bare
        token becomes the words of the value (split like a command line, never expanded);
        raises ValueError when the value's quotes don't pair up then."""
        if is_inert(value):
            return value
        if words and context == BARE and _INERT_WORDS_RE.fullmatch(value):
            return value  # e.g. "--pid-file /tmp/x --quiet": inert words, split where typed
        if context == ARITH:
            raise ValueError(
                "sits in an arithmetic expression of the script, where only a number or a name "
                "is safe: enter a number"
            )
        if context == BARE:
            if words:
                if not self.arrays:
                    raise ValueError(
                        "would be split into words, which needs bash: start the recipe's script "
                        "with #!/bin/bash, or use only letters, digits, spaces and _ @ % + = : , "
                        ". / - in the value"
                    )
                try:
                    shlex.split(value)
                except ValueError:
                    raise ValueError(
                        "has a quote that is not closed: these words are split like a shell "
                        "command line, so pair every ' and \" (or remove them)"
                    ) from None
                return f'"${{{self._variable(base, value, words=True)}[@]}}"'
            return f'"${{{self._variable(base, value)}}}"'
        if context == SQ:
            return f"'\"${{{self._variable(base, value)}}}\"'"
        return f"${{{self._variable(base, value)}}}"

    def lines(self) -> list[str]:
        if not self.assignments:
            return []
        return [
            "# obleth: the values below are data; the script refers to them as variables",
            *self.assignments.values(),
        ]
