"""Browser play: a Starlette app (`azjax.web.app.create_app`) and its static page."""
