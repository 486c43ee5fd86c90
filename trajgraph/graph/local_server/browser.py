"""Neo4j Browser for the local server (`trajgraph neo4j start --browser`).

The Browser is the ``org.neo4j.client:neo4j-browser`` jar from Maven Central: static files
under ``browser/`` that the server serves at ``/browser/`` when they are on its classpath. The
jar is fetched once (trajgraph.core.jvm) and unpacked into a folder, because the server serves the
first ``browser/`` resource of its classpath: unpacked, that folder also holds the trajgraph
guide (``/browser/trajgraph-guide.html``, written by ``write_guide``), which the Browser plays
after connecting.
"""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path

from trajgraph.core import jvm
from trajgraph.core.errors import ServerError
from trajgraph.core.jvm import Log, MavenFailure
from trajgraph.core.settings import LocalServerSettings

BROWSER_VERSION = "5.24.0"
BROWSER_COORDS = f"org.neo4j.client:neo4j-browser:{BROWSER_VERSION}"
GUIDE = "trajgraph-guide.html"
def browser_dir(local: LocalServerSettings) -> Path:
    """The unpacked Browser, put on the server's classpath."""
    return Path(local.home).expanduser().absolute() / f"neo4j-browser-{BROWSER_VERSION}"


def ensure_browser(local: LocalServerSettings, *, log: Log = print) -> Path:
    """The unpacked Browser with the trajgraph guide, fetched on first use only."""
    target = browser_dir(local)
    if not (target / "browser" / "index.html").is_file():
        jar = jvm.fetch_jar(
            BROWSER_COORDS, Path(local.home).expanduser() / "jars", fail=_error, log=log
        )
        partial = target.with_name(target.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        try:
            with zipfile.ZipFile(jar) as z:
                for member in z.namelist():
                    if member.startswith("browser/") and ".." not in member:
                        z.extract(member, partial)
        except (OSError, zipfile.BadZipFile) as e:
            raise ServerError(f"cannot unpack {jar}: {e}") from e
        shutil.rmtree(target, ignore_errors=True)
        partial.rename(target)
    return target


def write_guide(local: LocalServerSettings, guide: str) -> Path:
    """Put the trajgraph guide (``queries.library.browser_guide``: the front end passes it, so
    this floor never reads the read side) where the Browser plays it after connecting."""
    path = browser_dir(local) / "browser" / GUIDE
    path.write_text(guide, encoding="utf-8")
    return path


def _error(f: MavenFailure) -> ServerError:
    return ServerError(f"cannot fetch Neo4j Browser ({f.coords}): {f.reason}")
