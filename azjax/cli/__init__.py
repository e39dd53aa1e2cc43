"""Command-line entry points (`azjax-train`, `azjax-eval`, `azjax-play`, `azjax-serve`)."""
