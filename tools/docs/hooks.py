"""MkDocs hooks (``hooks:`` in mkdocs.yml): generated pages and checks, at every build.

- ``cli-reference.md`` from the argparse parser (tools/docs/gen_cli_reference.py),
- ``api-reference.md`` from ``curator_dask.__all__`` (tools/docs/gen_api_reference.py),
- ``configuration-keys.md`` from ``curator_dask/curator_dask.yaml``
  (tools/docs/gen_config_reference.py).

They are added to the build in memory (``File.generated``): nothing is written under
``docs/``, so there is nothing to commit or ignore, and a stale copy there is replaced. A
malformed ``<!-- runnable -->`` marker is a warning, which ``mkdocs build --strict`` turns into
an error. (A configuration key without a description is only logged here; a test catches it.)
"""

from __future__ import annotations

import logging
import os
import sys

from mkdocs.structure.files import File, Files

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import gen_api_reference  # noqa: E402
import gen_cli_reference  # noqa: E402
import gen_config_reference  # noqa: E402
import snippets  # noqa: E402

log = logging.getLogger("mkdocs.plugins.curator_dask_docs")


def _generated(docs_dir: str) -> dict[str, str]:
    keys_page = gen_config_reference.render(os.path.join(docs_dir, "configuration.md"))
    for row in gen_config_reference.keys(os.path.join(docs_dir, "configuration.md")):
        if not row["meaning"]:  # tests/docs/test_docs_build.py fails on these
            log.info("configuration key %r has no description: add a comment above it in "
                     "curator_dask/curator_dask.yaml", row["key"])
    return {
        "cli-reference.md": gen_cli_reference.render(),
        "api-reference.md": gen_api_reference.render(),
        "configuration-keys.md": keys_page,
    }


def on_files(files: Files, config, **kwargs) -> Files:
    for src_uri, content in _generated(config["docs_dir"]).items():
        existing = files.get_file_from_path(src_uri)
        if existing is not None:
            log.info("replacing docs/%s with the generated page", src_uri)
            files.remove(existing)
        files.append(File.generated(config, src_uri, content=content))
    try:
        snippets.find(config["docs_dir"])
    except snippets.SnippetError as exc:
        log.warning("%s", exc)
    return files
