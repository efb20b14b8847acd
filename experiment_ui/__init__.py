"""What the browser runs: Jinja templates, ES modules (one per trial type), CSS.

Not Python code: this package only tells the server where the files are."""
from pathlib import Path

HERE = Path(__file__).resolve().parent
TEMPLATES = HERE / "templates"
STATIC = HERE / "static"
