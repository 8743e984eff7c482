"""Monitor state: what the sources collected, folded into history and summaries that the UI and
the CLI show. Imports channel, sources and analysis; never textual, never torch."""
