"""manage.py deploy_recipe: review (--dry-run) or deploy a recipe, through the deploy service
(:mod:`recipes.deploy.service`, the same path as POST /api/v1/deployments)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from obleth.core.models import Model, Recipe

# Spec field names --set took before the deploy service (kept working).
_OLD_NAMES = {
    "target_replicas": "replicas",
    "cpus_per_task": "cpus",
    "health_path": "health_check",
    "script_body": "script",
}


def _pairs(items: list[str], flag: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CommandError(
                f"{flag} {item!r}: write {'NAME' if flag == '--input' else 'FIELD'}=VALUE"
            )
        out[key.strip()] = value
    return out


class Command(BaseCommand):
    help = (
        "Deploy a recipe as a model with its managed spec (like POST /api/v1/deployments). "
        "RECIPE is a .recipe file, a library recipe's name or a saved recipe's name or id."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("recipe", help="A .recipe file, a library slug or a saved recipe")
        parser.add_argument("--name", required=True, help="The model name clients will send.")
        parser.add_argument("--replicas", type=int, default=None)
        parser.add_argument("--partition", default=None)
        parser.add_argument(
            "--input",
            action="append",
            default=[],
            metavar="NAME=VALUE",
            help="A recipe input, e.g. --input loading=5 (repeatable).",
        )
        parser.add_argument(
            "--set",
            action="append",
            default=[],
            metavar="FIELD=VALUE",
            help="An override (partition, account, qos, time_limit, nodes, gpus, cpus, mem, "
            "constraints, exclude, log_output_dir, replicas, max_job_failures, health_check, "
            "serving_port, api_model_name...), e.g. --set time_limit=1:00:00",
        )
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="Print the review (job script, Slurm JSON, sources, checks) as JSON; "
            "write nothing.",
        )
        parser.add_argument(
            "--if-missing", action="store_true", help="Do nothing if the model exists."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        from recipes.deploy import service as deploy_service

        if options["if_missing"] and Model.objects.filter(name=options["name"]).exists():
            return
        overrides: dict[str, Any] = {}
        for key, value in _pairs(options["set"], "--set").items():
            key = _OLD_NAMES.get(key, key)
            if key == "script":
                raise CommandError("--set script_body: edit the recipe file instead.")
            if key not in deploy_service.OVERRIDES or key == "env":
                raise CommandError(
                    f"{key}: `{key}` is not a deploy setting. Use: "
                    f"{', '.join(k for k in deploy_service.OVERRIDES if k != 'env')}."
                )
            overrides[key] = value
        if options["replicas"] is not None:
            overrides["replicas"] = options["replicas"]
        if options["partition"]:
            overrides["partition"] = options["partition"]
        source: dict[str, Any] = {}
        target = options["recipe"]
        path = Path(target)
        if path.suffix == ".recipe" or "/" in target:
            if not path.is_file():
                raise CommandError(f"{path}: no such recipe file")
            source = {"recipe_text": path.read_text(), "recipe_file": str(path)}
            label = path.name
        else:
            saved = Recipe.objects.filter(name=target).first()
            if saved is None:
                try:
                    saved = Recipe.objects.filter(pk=target).first()
                except (ValidationError, ValueError):
                    saved = None
            source = {"recipe": str(saved.pk)} if saved else {"library": target}
            label = target
        request = deploy_service.DeployRequest(
            name=options["name"],
            inputs=_pairs(options["input"], "--input"),
            overrides=overrides,
            dry_run=options["dry_run"],
            **source,
        )
        try:
            if request.dry_run:
                review = deploy_service.plan_deployment(request)
                self.stdout.write(json.dumps(review.as_dict(), indent=2, default=str))
                if not review.ok:
                    raise CommandError(
                        "the cluster would refuse this launch: "
                        + "; ".join(f"{k}: {' '.join(v)}" for k, v in review.refusals.items())
                    )
                return
            result = deploy_service.deploy(request)
        except ValidationError as exc:
            messages = exc.message_dict if hasattr(exc, "error_dict") else {"recipe": exc.messages}
            raise CommandError(
                f"{label}: " + "; ".join(f"{k}: {' '.join(v)}" for k, v in messages.items())
            ) from None
        for warning in result.review.warnings:
            self.stderr.write(f"warning: {warning}")
        self.stderr.write(f"deployed {label} as model {result.model.name!r} ({result.model.pk})")
