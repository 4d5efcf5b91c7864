"""Recipes: a tested batch script with a small YAML header, and the deploy that launches one.

A recipe document is ``---`` / YAML header / ``---`` / batch script. The header carries the
routing metadata (engine, model type, API model name, port, health path, replica targets), the
default placement and the inputs an operator fills in when launching. This app, one module per
responsibility:

- :mod:`recipes.document` parses and checks a document (``parse_recipe``; errors are
  :class:`recipes.types.RecipeError`), reading the header with :mod:`recipes.header`;
- :mod:`recipes.sbatch` lifts ``#SBATCH`` directives into placement fields (``lift_sbatch``),
  because slurmrestd ignores them;
- :mod:`recipes.render` fills the script's ``{{tokens}}`` from inputs (:mod:`recipes.inputs`:
  ``validate_inputs``, ``input_defaults``), built-ins and the Slurm connection's cluster
  defaults (:mod:`recipes.cluster`), quoting values as :mod:`recipes.shell` says;
- :mod:`recipes.library` lists the library recipe files (``recipes/library/*.recipe``, or the
  folder settings.OBLETH_RECIPES_DIR names);
- :mod:`recipes.deploy.spec` creates a model and its managed spec from a recipe in one step
  (``deploy``), and :mod:`recipes.deploy.service` is the one deploy path (API, command, admin);
- :mod:`recipes.api` is its DRF view, :mod:`recipes.admin` the saved-recipe admin. The
  ``Recipe`` model itself stays in ``obleth.core.models`` (app label ``core``).

Tokens (``{{name}}``): a declared input, the built-ins ``api_model_name``, ``obleth_root`` and
``test_engine`` (the path of an installed, world-readable copy of the test engine),
and the cluster defaults ``cluster.cache``, ``cluster.images``, ``cluster.logs``,
``cluster.setup``, ``image.<engine>`` (also spelled ``cluster.image.<engine>``). Anything else,
including shell ``${...}`` and ``$(...)``, is left as written, and substituted text is never
scanned again.

Values are data, never shell code (the design, in full in :mod:`recipes.shell`):

- A value of inert characters only (letters, digits, ``_ @ % + = : , . / -``; every usual
  model id, folder, number) is written where its token is, so a script reads as it always did.
- Any other value is assigned once, single-quoted, to a variable at the top of the script
  (``OBLETH_INPUT_<name>=...``, ``OBLETH_VALUE_API_MODEL_NAME=...``, ``OBLETH_CLUSTER_CACHE=...``)
  and the token becomes a reference to it, written for where the token sits: ``"${X}"`` for a
  bare word, ``${X}`` inside ``"..."``, ``'"${X}"'`` inside ``'...'``; a bare ``text`` input
  becomes ``"${X[@]}"``, the words the operator typed, split like a command line, never expanded.
  Bash never re-reads an expanded variable as code, so quoting cannot go wrong wherever the
  token is; only arithmetic (``$((...))``) would, and there a non-inert value is refused.
- Every value that reaches the script (inputs, the API model name, cluster defaults) is refused
  when it holds NUL or control characters, a line break, ``#SBATCH`` or more than 4096
  characters; numbers, choices, flags and paths are checked against their type. The error names
  the input (``inputs.<name>``) and the fix. ``{{...}}`` typed in a value is text, never filled
  in (a cluster token there is refused with a hint); only the recipe's own defaults take
  cluster defaults.
- ``{{cluster.setup}}`` is the operator's own shell lines, inserted as written by design: it is
  an admin-only setting (validated when saved: no NUL, no ``#SBATCH`` lines).
- ``#SBATCH`` lines are read from the script as written (a ``{{token}}`` in one is refused), and
  ``deploy`` lifts placement from that text, never the rendered one; ``render`` also
  refuses a result whose ``#SBATCH`` lines differ from the recipe's.
- The YAML header is read with anchors and aliases refused, at most 16 levels deep and 64 KB; a
  whole recipe is at most 256 KB.
"""
