"""manage.py deploy_recipe: create a Slurm-hosted model from a recipe file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from obleth.core.models import Model, SlurmSettings


class Command(BaseCommand):
    help = "Deploy a recipe as a model with its managed spec (like the dashboard's deploy)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("recipe", help="Path to a .recipe file")
        parser.add_argument("--name", required=True, help="The model name clients will send.")
        parser.add_argument("--replicas", type=int, default=None)
        parser.add_argument("--partition", default=None)
        parser.add_argument(
            "--set",
            action="append",
            default=[],
            metavar="FIELD=VALUE",
            help="Any other override, e.g. --set time_limit=1:00:00",
        )
        parser.add_argument(
            "--if-missing", action="store_true", help="Do nothing if the model exists."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        from obleth.core.recipes import RecipeError, deploy

        if options["if_missing"] and Model.objects.filter(name=options["name"]).exists():
            return
        path = Path(options["recipe"])
        if not path.is_file():
            raise CommandError(f"{path}: no such recipe file")
        overrides: dict[str, Any] = {}
        if options["replicas"] is not None:
            overrides["target_replicas"] = options["replicas"]
        if options["partition"]:
            overrides["partition"] = options["partition"]
        for item in options["set"]:
            field, sep, value = item.partition("=")
            if not sep:
                raise CommandError(f"--set {item!r}: write FIELD=VALUE")
            overrides[field.strip()] = value
        try:
            model = deploy(
                recipe_text=path.read_text(),
                model_name=options["name"],
                overrides=overrides,
                cluster=SlurmSettings.load(),
            )
        except RecipeError as exc:
            raise CommandError(f"{path}: {exc}") from None
        except ValidationError as exc:
            raise CommandError(
                "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())
            ) from None
        self.stderr.write(f"deployed {path.name} as model {model.name!r} ({model.pk})")
