"""The recipe document "Also save as recipe" writes: the source recipe's header with the values
the operator gave, and the script they edited.

Part of the deploy service (:mod:`recipes.deploy.service`, ``save_as_recipe``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import yaml

if TYPE_CHECKING:
    from recipes.deploy.request import DeployRequest
    from recipes.deploy.review import Review


def _saved_body(review: Review, request: DeployRequest) -> str:
    """The recipe document the operator's settings make: the source's header with the values
    they gave (inputs become defaults), and the script they edited."""
    from recipes.header import _split_document, normalize_newlines

    header_text, script, _, _ = _split_document(normalize_newlines(review.recipe_text))
    header = yaml.safe_load(header_text) or {}
    sources = (review.spec.launcher_spec or {}).get("sources", {})
    for field in (
        "partition",
        "account",
        "qos",
        "time_limit",
        "mem",
        "gres",
        "nodes",
        "cpus_per_task",
        "constraints",
        "exclude",
        "target_replicas",
        "max_job_failures",
        "health_path",
    ):
        if sources.get(field) in ("override", "learned"):
            header[field] = getattr(review.spec, field)
    if sources.get("serving_port") == "override":
        header["port"] = review.spec.serving_port
    given = request.inputs
    for item in header.get("inputs") or []:
        if isinstance(item, dict) and item.get("name") in given:
            item["default"] = str(given[item["name"]])
    env = {**(header.get("env") or {}), **(request.overrides.get("env") or {})}
    if env:
        header["env"] = {k: str(v) for k, v in env.items()}
    if request.script is not None:
        script = request.script
    dumped = yaml.safe_dump(header, sort_keys=False, allow_unicode=True)
    return f"---\n{dumped}---\n{script.lstrip(chr(10))}"
