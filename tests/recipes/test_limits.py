"""The recipe document's limits: YAML anchors/aliases, nesting, sizes, NUL, and ``{{tokens}}``
in ``#SBATCH`` lines (directives are read as written)."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ValidationError

from obleth.core.models import Model, Recipe
from obleth.core.validators import validate_recipe_body
from recipes.deploy.spec import deploy
from recipes.document import parse_recipe
from recipes.header import MAX_HEADER_CHARS, MAX_RECIPE_CHARS
from recipes.library import library_recipes
from recipes.types import RecipeError
from tests.recipes.helpers import BASE_HEADER, doc, with_header

# The 461-byte header: nine levels of nine aliases (29 s and 1.3 GB before).
BOMB = (
    "---\n"
    + BASE_HEADER
    + 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    + "".join(
        f"{n}: &{n} [{','.join([f'*{p}'] * 9)}]\n"
        for p, n in zip("abcdefgh", "bcdefghi", strict=True)
    )
    + "---\n#!/bin/bash\necho serve\n"
)


def test_alias_bomb_is_refused_with_a_clear_message() -> None:
    with pytest.raises(RecipeError) as info:
        parse_recipe(BOMB)
    assert info.value.field == "header"
    assert "anchors and aliases" in str(info.value) and "write each value out" in str(info.value)
    assert str(info.value).startswith("Line 7:")


@pytest.mark.parametrize(
    "extra",
    [
        "x: &x 1\n",  # an anchor alone
        "x: *x\n",  # an alias alone (undefined)
        "base: &b {mem: 1G}\nother:\n  <<: *b\n",  # a merge key
        "inputs:\n  - &i {name: a}\n",
    ],
)
def test_any_anchor_or_alias_is_refused(extra: str) -> None:
    with pytest.raises(RecipeError, match="anchors and aliases"):
        parse_recipe(with_header(extra))


def test_deep_nesting_is_refused() -> None:
    deep = "x: " + "[" * 5000 + "]" * 5000 + "\n"
    with pytest.raises(RecipeError, match="nests deeper than 16"):
        parse_recipe(with_header(deep))
    ok = "x: " + "[" * 10 + "]" * 10 + "\n"
    assert parse_recipe(with_header(ok)).header["x"] is not None


def test_header_and_document_sizes() -> None:
    big_header = with_header(f"description: {'d' * (MAX_HEADER_CHARS + 1)}\n")
    with pytest.raises(RecipeError, match="YAML header is"):
        parse_recipe(big_header)
    big_doc = doc(script="#!/bin/bash\n" + "# pad\n" * (MAX_RECIPE_CHARS // 6 + 1))
    with pytest.raises(RecipeError, match="a recipe is at most"):
        parse_recipe(big_doc)


def test_nul_anywhere_is_refused_with_its_line() -> None:
    with pytest.raises(RecipeError) as info:
        parse_recipe(doc(script="#!/bin/bash\necho a\x00b\n"))
    assert info.value.line == 9 and "NUL" in str(info.value)
    with pytest.raises(RecipeError, match="NUL"):
        parse_recipe(with_header("description: a\x00b\n"))


def test_api_model_name_in_the_header_is_one_clean_line() -> None:
    text = doc(BASE_HEADER.replace("demo-model", '"a #SBATCH --qos=x"'))
    with pytest.raises(RecipeError) as info:
        parse_recipe(text)
    assert info.value.field == "api_model_name"


def test_tokens_in_directives_are_refused() -> None:
    text = with_header(
        "inputs:\n  - name: part\n", "#!/bin/bash\n#SBATCH --partition={{part}}\necho\n"
    )
    with pytest.raises(RecipeError) as info:
        parse_recipe(text)
    assert info.value.field == "script" and info.value.line == 11
    assert "read as written" in str(info.value)


def test_invalid_library_file_with_a_bomb_lists_quickly(tmp_path: object) -> None:
    from pathlib import Path

    folder = Path(str(tmp_path))
    (folder / "bomb.recipe").write_text(BOMB)
    (item,) = library_recipes(folder)
    assert not item.valid and "anchors and aliases" in (item.error or "")
    assert item.header == {}


@pytest.mark.django_db
def test_saving_a_bomb_as_a_recipe_row_is_a_validation_error() -> None:
    with pytest.raises(ValidationError, match="anchors and aliases"):
        validate_recipe_body(BOMB)
    row = Recipe(name="bomb", body=BOMB)
    with pytest.raises(ValidationError) as info:
        row.full_clean()
    assert "body" in info.value.message_dict


@pytest.mark.django_db
def test_deploy_lifts_the_script_as_written_and_refuses_tokens_in_edited_directives() -> None:
    text = with_header(
        "partition: p\ninputs:\n  - name: model\n    required: true\n",
        "#!/bin/bash\n#SBATCH --qos=own\nserve {{model}}\n",
    )
    model = deploy(
        recipe_text=text, model_name="lifted", overrides={"inputs": {"model": "m"}}, cluster=None
    )
    assert model.managed_spec.qos == "own"
    with pytest.raises(ValidationError) as info:
        deploy(
            recipe_text=text,
            model_name="edited",
            overrides={
                "inputs": {"model": "m"},
                "script_body": "#!/bin/bash\n#SBATCH --qos={{model}}\nserve {{model}}\n",
            },
            cluster=None,
        )
    assert "script_body" in info.value.message_dict
    assert not Model.objects.filter(name="edited").exists()


@pytest.mark.django_db
def test_deploy_refuses_nul_in_every_text_field() -> None:
    text = with_header(
        "partition: p\ninputs:\n  - name: model\n    required: true\n",
        "#!/bin/bash\nrun {{model}}\n",
    )
    cases: list[tuple[dict[str, Any], str]] = [
        ({"name": "a\x00b"}, "name"),
        ({"overrides": {"partition": "p\x00"}}, "partition"),
        ({"overrides": {"script_body": "#!/bin/bash\n\x00\n"}}, "script_body"),
        ({"overrides": {"api_model_name": "a\x00"}}, "api_model_name"),
        ({"overrides": {"log_output_dir": "/l\x00"}}, "log_output_dir"),
        ({"overrides": {"inputs": {"model": "a\x00"}}}, "inputs.model"),
        ({"overrides": {"inputs": {"model": ["a"]}}}, "inputs.model"),
        ({"overrides": {"inputs": {"model": "m", "x\x00": "1"}}}, "inputs.x\\x00"),
    ]
    for change, field in cases:
        overrides = {"inputs": {"model": "m"}, **change.get("overrides", {})}
        with pytest.raises(ValidationError) as info:
            deploy(
                recipe_text=text,
                model_name=change.get("name", "n"),
                overrides=overrides,
                cluster=None,
            )
        assert field in info.value.message_dict, (field, info.value.message_dict)
    assert Model.objects.count() == 0


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "phrase"),
    [
        (BOMB, "anchors and aliases"),
        (doc(script="#!/bin/bash\necho a\x00b\n"), "NUL"),
        (
            with_header("inputs:\n  - name: p\n", "#!/bin/bash\n#SBATCH -p {{p}}\necho\n"),
            "read as written",
        ),
    ],
)
def test_api_refuses_a_bad_recipe_body_with_400(api_client: Any, body: str, phrase: str) -> None:
    response = api_client.post(
        "/api/v1/recipes", {"name": "bad", "body": body, "author": "me"}, format="json"
    )
    assert response.status_code == 400, response.content
    text = response.content.decode()
    assert "body" in text and (phrase in text or "Null characters" in text), text
    assert not Recipe.objects.exists()
