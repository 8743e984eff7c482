"""The panels' text: pure functions from a View to Rich Text, one module per panel; no Textual here
(cli's `--plain` lines use some), screens/ shows them. Strings from other processes (range names,
command lines, process names) are appended as plain text and never parsed as markup."""
