"""From Hugging Face: a repo id -> its files -> the engines that can run it -> a library recipe.

:func:`read_repo` asks the hub with ``huggingface_hub`` (``HfApi.model_info``, the Hugging Face
token from the Slurm settings for gated repos) and :func:`engines_for` picks the engines from the
files: safetensors -> vLLM, SGLang; GGUF -> llama.cpp, Ollama. Each engine names the library
recipe that runs it and the inputs that point it at the repo (``model``), or says why none
does. When the hub cannot be reached or refuses, :class:`HfRepo` carries the reason and the
operator enters the engine by hand (picks a library recipe).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["EngineChoice", "HfRepo", "engines_for", "read_repo", "REPO_ID_RE"]

REPO_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
_TIMEOUT_SECS = 10.0


@dataclasses.dataclass(frozen=True)
class EngineChoice:
    engine: str
    library: str  # the library recipe's slug ("" when none takes this repo)
    inputs: dict[str, str]
    why: str


@dataclasses.dataclass(frozen=True)
class HfRepo:
    repo_id: str
    files: tuple[str, ...] = ()
    gated: bool = False
    engines: tuple[EngineChoice, ...] = ()
    error: str = ""  # set when the hub could not be read: enter the engine by hand

    @property
    def preselected(self) -> EngineChoice | None:
        return next((e for e in self.engines if e.library), None)

    def as_dict(self) -> dict[str, Any]:
        return {
            "repo_id": self.repo_id,
            "files": list(self.files[:50]),
            "gated": self.gated,
            "engines": [dataclasses.asdict(e) for e in self.engines],
            "preselected": self.preselected.library if self.preselected else "",
            "error": self.error,
        }


def engines_for(
    repo_id: str, files: Sequence[str], library: Sequence[tuple[str, str, set[str]]]
) -> list[EngineChoice]:
    """The engines that can run a repo with these files. ``library``: (slug, engine, input
    names) of each valid library recipe."""
    lower = [f.lower() for f in files]
    wanted: list[tuple[str, str]] = []
    if any(f.endswith(".safetensors") for f in lower):
        wanted += [("vllm", repo_id), ("sglang", repo_id)]
    if any(f.endswith(".gguf") for f in lower):
        wanted += [("llamacpp", repo_id), ("ollama", f"hf.co/{repo_id}")]
    out: list[EngineChoice] = []
    for engine, model in wanted:
        recipe = next(
            (slug for slug, eng, inputs in library if eng == engine and "model" in inputs), ""
        )
        if recipe:
            out.append(EngineChoice(engine, recipe, {"model": model}, f"library recipe {recipe!r}"))
        else:
            out.append(
                EngineChoice(
                    engine,
                    "",
                    {},
                    f"no library recipe runs {engine} with a model input: enter it by hand",
                )
            )
    return out


def _library() -> list[tuple[str, str, set[str]]]:
    from recipes.library import library_recipes

    return [
        (item.slug, item.parsed.engine, {i.name for i in item.parsed.inputs})
        for item in library_recipes()
        if item.parsed is not None
    ]


def read_repo(
    repo_id: str,
    *,
    token: str = "",
    model_info: Callable[..., Any] | None = None,
    endpoint: str | None = None,
) -> HfRepo:
    """The repo's files and the engines that can run it; never raises for the hub's sake.

    ``model_info`` replaces ``HfApi.model_info`` (tests feed recorded answers through it)."""
    if not REPO_ID_RE.match(repo_id or ""):
        return HfRepo(
            repo_id=repo_id,
            error="a repo id is owner/name, e.g. HuggingFaceTB/SmolLM2-135M-Instruct",
        )
    try:
        if model_info is None:
            from huggingface_hub import HfApi

            model_info = HfApi(endpoint=endpoint, token=token or False).model_info
        info = model_info(repo_id, timeout=_TIMEOUT_SECS)
    except Exception as exc:  # the hub unreachable, 401/403/404, gated...: degrade, never a 500
        name = type(exc).__name__
        text = str(exc).split("\n", 1)[0][:300]
        if token:
            text = text.replace(token, "[redacted]")
        if name == "GatedRepoError":
            why = "the repo is gated: set the Hugging Face token in the Slurm settings"
        elif name == "RepositoryNotFoundError":
            why = "no such repo (or it is private: set the Hugging Face token)"
        else:
            why = f"the Hugging Face hub could not be read ({name}: {text})"
        return HfRepo(repo_id=repo_id, error=why)
    files = tuple(sorted(str(s.rfilename) for s in (getattr(info, "siblings", None) or [])))
    gated = bool(getattr(info, "gated", False))
    return HfRepo(
        repo_id=repo_id,
        files=files,
        gated=gated,
        engines=tuple(engines_for(repo_id, files, _library())),
        error="" if files else "the hub lists no files for this repo",
    )
