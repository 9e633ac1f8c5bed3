"""The attention explorer and translation server, started by `attnlab serve`: the FastAPI app
(`app.create_app`), its bounds (`guard.Limits`), the explorer's per-request pool (`pool`), the
micro-batcher of POST /api/translations (`batcher.MicroBatcher`), the request and response schemas
(`schemas`) and the static page in `static/`.

This package re-exports nothing, so `attnlab --help` (which reads `guard.Limits`' defaults for the
serve flags) loads neither FastAPI nor torch.
"""
