"""The Textual UI: app, screens, panels. Imports everything below it, never torch."""
