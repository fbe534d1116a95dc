"""Renderers: interchangeable views (console, markdown, JSON, plots) of one RunResult."""
