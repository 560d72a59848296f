"""README's office-tools table lists every tool the office registers, with its true arguments and description.

The rows are generated here from :data:`pytest_agentperturb.formats.native.office.OFFICE`
(``python tests/test_readme_office_tools.py`` prints them) and must equal the
README's table under "Writing your first suite", so the table cannot go stale.
"""

from __future__ import annotations

from pathlib import Path

from pytest_agentperturb.formats.native.office import OFFICE

README = Path(__file__).resolve().parent.parent / "README.md"
HEADER = "| tool | arguments | what it does |"


def office_rows() -> list[str]:
    """One table row per registered office tool, in registration order."""
    rows = []
    for name in OFFICE:
        fn = OFFICE.schemas([name])[0]["function"]
        params = fn["parameters"]
        required = set(params.get("required", []))
        args = []
        for arg, spec in params["properties"].items():
            text = arg + ("" if arg in required else "?")
            if "enum" in spec:
                text += " (" + "/".join(spec["enum"]) + ")"
            if spec.get("type") == "array":
                text += " [list]"
            args.append(text)
        rows.append(f"| `{name}` | {', '.join(args) or '-'} | {fn['description']} |")
    return rows


def readme_rows() -> list[str]:
    lines = README.read_text(encoding="utf-8").splitlines()
    start = lines.index(HEADER) + 2                     # after the header and its |---| line
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append(line)
    return rows


def test_the_readme_lists_every_office_tool_as_registered() -> None:
    assert len(list(OFFICE)) >= 20
    assert readme_rows() == office_rows()


if __name__ == "__main__":
    print(HEADER)
    print("|---|---|---|")
    print("\n".join(office_rows()))
