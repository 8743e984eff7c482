"""The Textual UI. Imports everything below it, never torch.

app.py        the app (make_app: shared by the CLI, the tests and the screenshot script)
screens/      one module per screen (Textual)
panels/       one module per panel: pure functions from a View to Rich Text; no Textual
format.py     numbers and words as plain strings, shared by the panels, `--plain` and `--once`
plain.py      the plain-text views: `--once` and `--plain`'s line, `top --once`'s lines
style.py      the colours given to verdicts, comparison states and phases
widgets.py    Panel: a text widget that sends the terminal only the cells that changed"""
