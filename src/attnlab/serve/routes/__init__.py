"""The API's routes, one router per group: explain (POST /api/explain, the page's), translations
(POST /api/translations, for programs), model (GET /api/model, /api/positions) and pages (/, /docs,
/healthz)."""

from . import explain, model, pages, translations

__all__ = ["explain", "model", "pages", "translations"]
