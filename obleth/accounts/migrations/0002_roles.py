"""Create the viewer, operator and admin groups with the permissions their rules grant.

The same rules run again after every migrate (obleth.accounts.apps), so models added later by
any app are covered; this migration makes the groups exist as soon as the schema does.
"""

from typing import Any

from django.db import migrations


def create_roles(apps: Any, schema_editor: Any) -> None:
    from obleth.accounts.roles import apply_roles

    apply_roles(apps, using=schema_editor.connection.alias)


def remove_roles(apps: Any, schema_editor: Any) -> None:
    from obleth.accounts.roles import ROLE_NAMES

    group = apps.get_model("auth", "Group")
    group.objects.using(schema_editor.connection.alias).filter(name__in=ROLE_NAMES).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0001_initial"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("core", "0006_action_permissions"),
    ]

    operations = [migrations.RunPython(create_roles, remove_roles)]
