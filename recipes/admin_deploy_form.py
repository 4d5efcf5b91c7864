"""The admin deploy page's form <-> a deploy service request (no HTTP, no rules of its own).

The page shows every value with its source. A field the operator did not change is not sent,
so the service applies it again with its own source (recipe, cluster default, learned...);
a changed field is sent and becomes "you". What "unchanged" means is kept in the page as
``base`` (a hidden JSON field): each field's value and source without the operator's changes,
as the last plan (or :func:`recipes.deploy.form.start`) gave them. A tampered ``base`` can
only make the page send fewer values than were typed: every value is still checked by the
service.

"Edit as YAML" is the same fields as one YAML document (``name``, ``inputs``, ``overrides``,
``save_as_recipe``); reading it back gives the same fields, so a round trip changes nothing.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

import yaml
from django.core.exceptions import ValidationError

from recipes.header import _load_header as load_yaml  # the recipe header's safe loader
from recipes.header import normalize_newlines
from recipes.types import ParsedRecipe

__all__ = [
    "FIELDS",
    "Base",
    "FieldDef",
    "PageState",
    "digest",
    "field_of",
    "request_data",
    "state_from_post",
    "state_from_yaml",
    "state_to_yaml",
    "text_of",
]

MAX_YAML_CHARS = 64 * 1024
_PLAIN_INT = re.compile(r"0|[1-9][0-9]{0,17}")
TRUE_WORDS = frozenset({"true", "on", "1", "yes"})


@dataclasses.dataclass(frozen=True)
class FieldDef:
    key: str  # the request's override name
    label: str
    help: str = ""
    group: str = "Where it runs"
    numeric: bool = False


FIELDS: tuple[FieldDef, ...] = (
    FieldDef("partition", "Partition"),
    FieldDef("account", "Account", "Blank: your default account."),
    FieldDef("qos", "QoS", "Blank: the account's default QoS."),
    FieldDef("time_limit", "Walltime", "Minutes (30), H:MM:SS (2:00:00) or D-HH:MM:SS."),
    FieldDef("nodes", "Nodes per replica", numeric=True),
    FieldDef("gpus", "GPUs per node", "0: none.", numeric=True),
    FieldDef("cpus", "CPUs per task", numeric=True),
    FieldDef("mem", "Memory per node", "e.g. 16G or 512M; 0: the whole node."),
    FieldDef("constraints", "Node features", "Slurm --constraint, e.g. a100|h100."),
    FieldDef("exclude", "Avoid nodes", "Slurm --exclude, e.g. node[01-03]."),
    FieldDef("replicas", "Replicas", group="How it runs", numeric=True),
    FieldDef("min_replicas", "Minimum replicas", group="How it runs", numeric=True),
    FieldDef(
        "max_job_failures",
        "Stop after failed launches",
        "Failed launches in a row before the provisioner stops launching.",
        group="How it runs",
        numeric=True,
    ),
    FieldDef("health_check", "Health check path", "e.g. /health.", group="How it runs"),
    FieldDef(
        "serving_port",
        "First serving port",
        "Each replica gets the first free port window from here.",
        group="How it runs",
        numeric=True,
    ),
    FieldDef("api_model_name", "Engine's model name", group="How it runs"),
    FieldDef("log_output_dir", "Log folder", group="How it runs"),
    FieldDef(
        "env",
        "Environment",
        "One NAME=value a line, exported in the job after the recipe's own.",
        group="Environment",
    ),
)
KEYS = tuple(f.key for f in FIELDS)
_NUMERIC = frozenset(f.key for f in FIELDS if f.numeric)


# ----------------------------------------------------------------------------- values as text


def text_of(value: Any) -> str:
    """A service value as the text a field shows (env: NAME=value lines)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        return "\n".join(f"{k}={v}" for k, v in value.items())
    return str(value)


def _env_of(text: str) -> dict[str, str]:
    """NAME=value lines -> a mapping; a line without ``=`` is refused naming it."""
    env: dict[str, str] = {}
    for number, line in enumerate(normalize_newlines(text).split("\n"), start=1):
        if not line.strip():
            continue
        name, eq, value = line.partition("=")
        if not eq or not name.strip():
            shown = line if len(line) <= 60 else line[:60] + "…"
            raise ValidationError(
                {"overrides.env": [f"Line {number} ({shown!r}) is not NAME=value."]}
            )
        env[name.strip()] = value
    return env


@dataclasses.dataclass
class Base:
    """Each field's value (as text) and source without the operator's changes."""

    inputs: dict[str, tuple[str, str]] = dataclasses.field(default_factory=dict)
    overrides: dict[str, tuple[str, str]] = dataclasses.field(default_factory=dict)
    input_types: dict[str, str] = dataclasses.field(default_factory=dict)
    script_sha: str = ""

    @classmethod
    def of(
        cls,
        values: Mapping[str, Mapping[str, Any]],
        inputs: Mapping[str, Mapping[str, Any]],
        parsed: ParsedRecipe,
        script: str,
    ) -> Base:
        return cls(
            inputs={
                k: (text_of(v.get("value")), str(v.get("source", ""))) for k, v in inputs.items()
            },
            overrides={
                k: (text_of(values[k].get("value")), str(values[k].get("source", "")))
                for k in KEYS
                if k in values
            },
            input_types={i.name: i.type for i in parsed.inputs},
            script_sha=script_sha(script),
        )

    def updated(self, newer: Base, given_inputs: set[str], given_overrides: set[str]) -> Base:
        """``newer`` for the fields the operator did not change; the old base for the others
        (their value without the change is still the old one)."""
        return Base(
            inputs={
                k: self.inputs.get(k, v) if k in given_inputs else v
                for k, v in newer.inputs.items()
            },
            overrides={
                k: self.overrides.get(k, v) if k in given_overrides else v
                for k, v in newer.overrides.items()
            },
            input_types=newer.input_types,
            script_sha=self.script_sha or newer.script_sha,
        )

    def dumps(self) -> str:
        return json.dumps(dataclasses.asdict(self), separators=(",", ":"))

    @classmethod
    def loads(cls, text: str) -> Base:
        """The hidden field back; anything malformed gives an empty base (every field counts
        as typed: the service checks each)."""
        try:
            raw = json.loads(text or "{}")
        except ValueError:
            return cls()
        if not isinstance(raw, dict):
            return cls()

        def pairs(value: Any) -> dict[str, tuple[str, str]]:
            if not isinstance(value, dict):
                return {}
            return {
                str(k): (str(v[0]), str(v[1]))
                for k, v in value.items()
                if isinstance(v, list) and len(v) == 2
            }

        types = raw.get("input_types")
        return cls(
            inputs=pairs(raw.get("inputs")),
            overrides=pairs(raw.get("overrides")),
            input_types={str(k): str(v) for k, v in types.items()}
            if isinstance(types, dict)
            else {},
            script_sha=str(raw.get("script_sha") or ""),
        )


def script_sha(script: str) -> str:
    return hashlib.sha256(normalize_newlines(script).encode()).hexdigest()


# ----------------------------------------------------------------------------- the page's state


@dataclasses.dataclass
class PageState:
    source: str  # "library:<slug>" or "saved:<id>": the recipe whose fields are shown
    hf_repo: str = ""  # set: the request names the repo (the service resolves it each time)
    name: str = ""
    inputs: dict[str, str] = dataclasses.field(default_factory=dict)
    overrides: dict[str, str] = dataclasses.field(default_factory=dict)
    script: str = ""
    save_as_recipe: str = ""
    base: Base = dataclasses.field(default_factory=Base)
    mode: str = "form"  # or "yaml"
    yaml_text: str = ""

    def _same(self, name: str, text: str, kind: str) -> bool:
        base = self.base.inputs.get(name)
        if base is None:
            return False
        if kind == "flag":
            return (text.strip().lower() in TRUE_WORDS) == (base[0].strip().lower() in TRUE_WORDS)
        return text == base[0]

    def given_inputs(self) -> dict[str, str]:
        return {
            k: v
            for k, v in self.inputs.items()
            if not self._same(k, v, self.base.input_types.get(k, "text"))
        }

    def given_overrides(self) -> dict[str, str]:
        out = {}
        for key, text in self.overrides.items():
            base = self.base.overrides.get(key)
            if key == "env":
                same = base is not None and _env_text(text) == _env_text(base[0])
            else:
                same = base is not None and text == base[0]
            if not same:
                out[key] = text
        return out

    def script_given(self) -> bool:
        return bool(self.base.script_sha) and script_sha(self.script) != self.base.script_sha

    def source_of_input(self, name: str) -> str:
        if name in self.given_inputs():
            return "you"
        return self.base.inputs.get(name, ("", ""))[1]

    def source_of_override(self, key: str) -> str:
        if key in self.given_overrides():
            return "you"
        return self.base.overrides.get(key, ("", ""))[1]

    def rebase(self, newer: Base) -> None:
        """After a plan: the fields the operator did not change take the plan's values and
        sources (a free port range, a learned account...); the changed ones stay as typed."""
        given_inputs, given_overrides = set(self.given_inputs()), set(self.given_overrides())
        self.base = self.base.updated(newer, given_inputs, given_overrides)
        for key, (value, _) in self.base.inputs.items():
            if key not in given_inputs:
                self.inputs[key] = value
        for key, (value, _) in self.base.overrides.items():
            if key not in given_overrides:
                self.overrides[key] = value

    def apply(self, overrides: Mapping[str, Any]) -> None:
        """Merge a picked suggestion's overrides into the fields."""
        for key, value in overrides.items():
            if key in KEYS:
                self.overrides[key] = text_of(value)


def _env_text(text: str) -> str:
    return "\n".join(line.strip() for line in normalize_newlines(text).split("\n") if line.strip())


def state_from_post(post: Mapping[str, Any]) -> PageState:
    """The page's fields from a POST (a QueryDict or any mapping of name -> text)."""

    def get(name: str) -> str:
        value = post.get(name)
        return value if isinstance(value, str) else ""

    base = Base.loads(get("base"))
    state = PageState(
        source=get("source"),
        hf_repo=get("hf_repo").strip(),
        name=get("name").strip(),
        script=normalize_newlines(get("script")),
        save_as_recipe=get("save_as_recipe").strip(),
        base=base,
        mode="yaml" if get("mode") == "yaml" else "form",
        yaml_text=get("yaml"),
    )
    if state.mode == "form":
        for name, kind in base.input_types.items():
            field = f"in.{name}"
            if kind == "flag":
                state.inputs[name] = "true" if get(field) else "false"
            elif field in post:
                state.inputs[name] = get(field).strip()
        for key in KEYS:
            field = f"ov.{key}"
            if field in post:
                text = get(field)
                state.overrides[key] = normalize_newlines(text) if key == "env" else text.strip()
    else:
        state.inputs = {k: v for k, (v, _) in base.inputs.items()}
        state.overrides = {k: v for k, (v, _) in base.overrides.items()}
    return state


def fill_from_base(state: PageState) -> None:
    """Fields not shown yet take their base value."""
    for key, (value, _) in state.base.inputs.items():
        state.inputs.setdefault(key, value)
    for key, (value, _) in state.base.overrides.items():
        state.overrides.setdefault(key, value)


# ----------------------------------------------------------------------------- the request


def _override_value(key: str, text: str) -> Any:
    if key == "env":
        return _env_of(text)
    return text


def request_data(state: PageState, *, dry_run: bool) -> dict[str, Any]:
    """The body for :func:`recipes.deploy.service.request_from_data`: only the values the
    operator changed. Raises ValidationError naming a field the page itself cannot read
    (an env line that is not NAME=value)."""
    from recipes.deploy.form import request_source

    data: dict[str, Any] = {"name": state.name, "dry_run": dry_run}
    if state.hf_repo:
        data["hf_repo"] = state.hf_repo
    else:
        data.update(request_source(state.source))
    inputs = state.given_inputs()
    if inputs:
        data["inputs"] = inputs
    overrides = {k: _override_value(k, v) for k, v in state.given_overrides().items()}
    if overrides:
        data["overrides"] = overrides
    if state.script_given():
        data["script"] = state.script
    if state.save_as_recipe:
        data["save_as_recipe"] = state.save_as_recipe
    return data


def digest(data: Mapping[str, Any]) -> str:
    """What was reviewed, to tell whether Launch sends the same request."""
    body = {k: v for k, v in data.items() if k != "dry_run"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


def field_of(key: str, input_names: set[str]) -> str | None:
    """The page field that shows a service error key; None for an error of the whole form."""
    if key in ("name", "script", "save_as_recipe", "yaml"):
        return key
    if key in ("recipe", "library", "hf_repo"):
        return "source"
    base, _, rest = key.partition(".")
    if base == "inputs" and rest in input_names:
        return f"in.{rest}"
    if base == "overrides":
        head = rest.split(".", 1)[0]
        if head == "gres":
            return "ov.gpus"
        if head in KEYS:
            return f"ov.{head}"
    return None


# ----------------------------------------------------------------------------- YAML


def _yaml_scalar(key: str, text: str) -> Any:
    if key in _NUMERIC and _PLAIN_INT.fullmatch(text):
        return int(text)  # "2" reads as 2; "007" or "²" stay text, so they read back the same
    return text


def state_to_yaml(state: PageState) -> str:
    """The fields as one YAML document (every value, changed or not)."""
    doc: dict[str, Any] = {"name": state.name}
    doc["inputs"] = dict(state.inputs)
    overrides: dict[str, Any] = {}
    for key in KEYS:
        if key not in state.overrides:
            continue
        text = state.overrides[key]
        if key == "env":
            try:
                overrides[key] = _env_of(text)
            except ValidationError:
                overrides[key] = text
        else:
            overrides[key] = _yaml_scalar(key, text)
    doc["overrides"] = overrides
    if state.save_as_recipe:
        doc["save_as_recipe"] = state.save_as_recipe
    # YAML reads NEL and the Unicode line/paragraph separators as line breaks even inside quotes
    # unless they are escaped, which PyYAML does only with allow_unicode off.
    plain = not any(ch in json.dumps(doc, ensure_ascii=False) for ch in "\x85\u2028\u2029")
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=plain, width=1000)


def _scalar(value: Any, where: str) -> str:
    if isinstance(value, Mapping | list | tuple):
        raise ValidationError({"yaml": [f"{where}: give one value, not a list or a mapping."]})
    return text_of(value)


def state_from_yaml(state: PageState, text: str) -> None:
    """Read the YAML document into the fields. A key left out takes the value it has without
    changes (its base). Raises ValidationError on ``yaml`` naming what is wrong."""
    if len(text) > MAX_YAML_CHARS:
        raise ValidationError(
            {"yaml": [f"The YAML is {len(text)} characters long: at most {MAX_YAML_CHARS}."]}
        )
    try:
        doc = load_yaml(normalize_newlines(text)) if text.strip() else {}
    except yaml.YAMLError as exc:
        raise ValidationError({"yaml": [f"Not valid YAML: {exc}".replace("\n", " ")]}) from None
    if not isinstance(doc, Mapping):
        raise ValidationError({"yaml": ["Give a mapping: name, inputs, overrides."]})
    known = ("name", "inputs", "overrides", "save_as_recipe")
    unknown = [str(k) for k in doc if k not in known]
    if unknown:
        raise ValidationError({"yaml": [f"Unknown key {unknown[0]!r}: use {', '.join(known)}."]})
    inputs = doc.get("inputs") or {}
    overrides = doc.get("overrides") or {}
    for part, value in (("inputs", inputs), ("overrides", overrides)):
        if not isinstance(value, Mapping):
            raise ValidationError({"yaml": [f"{part}: give a mapping of name: value."]})
    declared = set(state.base.input_types)
    new_inputs: dict[str, str] = {}
    for key, value in inputs.items():
        if str(key) not in declared:
            listed = ", ".join(sorted(declared)) or "none"
            raise ValidationError(
                {"yaml": [f"inputs.{key} is not an input of this recipe (its inputs: {listed})."]}
            )
        new_inputs[str(key)] = _scalar(value, f"inputs.{key}").strip()
    new_overrides: dict[str, str] = {}
    for key, value in overrides.items():
        if key not in KEYS:
            raise ValidationError(
                {"yaml": [f"overrides.{key} is not a field here. Use: {', '.join(KEYS)}."]}
            )
        if key == "env":
            if not isinstance(value, Mapping):
                raise ValidationError({"yaml": ["overrides.env: give a mapping of NAME: value."]})
            new_overrides["env"] = "\n".join(
                f"{k}={_scalar(v, f'overrides.env.{k}')}" for k, v in value.items()
            )
        else:
            new_overrides[str(key)] = _scalar(value, f"overrides.{key}").strip()
    if "name" in doc:
        state.name = _scalar(doc["name"] or "", "name").strip()
    if "save_as_recipe" in doc:
        state.save_as_recipe = _scalar(doc["save_as_recipe"] or "", "save_as_recipe").strip()
    state.inputs = {k: new_inputs.get(k, v) for k, (v, _) in state.base.inputs.items()}
    state.overrides = {k: new_overrides.get(k, v) for k, (v, _) in state.base.overrides.items()}
    state.yaml_text = text
