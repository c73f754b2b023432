"""The console (`kiqbeat web`): server-rendered pages and a versioned JSON API over the
schedule store, behind tokens (DESIGN §9). The `web` extra; nothing outside this package
and `kiqbeat web` imports it.

- app.py: the ASGI app (security headers, Origin and Host checks, routes)
- auth.py: tokens, sessions, CSRF
- console.py: what the pages and the API do, over kiqbeat.store.Store
- api.py, openapi.py: the JSON API and its description
- pages.py, templates/, static/: the pages
- recent.py: the overview's recent pushes (a walk of the histories)
- metrics.py: Prometheus metrics
"""
