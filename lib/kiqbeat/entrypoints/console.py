"""`kiqbeat web` (the console and its JSON API, served by uvicorn) and `kiqbeat audit`.

The web stack (the `web` extra) is imported only when `kiqbeat web` runs: no other
command, and neither the Lambda handler nor an invocation, loads it.

`kiqbeat web` refuses to listen on an address that is not loopback unless tokens are set
(KIQBEAT_WEB_TOKEN, KIQBEAT_WEB_READ_TOKEN or their _FILE forms: kiqbeat.web.auth).
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from kiqbeat.entrypoints.common import opened_engine, print_outcome, store_flags
from kiqbeat.errors import ConfigError, shown
from kiqbeat.settings import add_flags, flags_of


def _cmd_web(args: argparse.Namespace) -> int:
    from kiqbeat.engine import Engine

    try:
        import uvicorn

        from kiqbeat.web.app import create_app
        from kiqbeat.web.auth import Auth, is_loopback
        from kiqbeat.web.serve import server_config
    except ImportError as exc:
        raise ConfigError(f"`kiqbeat web` needs the web extra: pip install 'kiqbeat[web]' "
                          f"({exc})") from None
    auth = Auth.from_environ(os.environ, anonymous=True)  # anonymous: no token is set
    if auth.anonymous and not is_loopback(args.host):
        raise ConfigError(f"refusing to listen on {args.host} without authentication: set "
                          "KIQBEAT_WEB_TOKEN (operators) and/or KIQBEAT_WEB_READ_TOKEN "
                          "(readers), or their _FILE forms; or listen on 127.0.0.1")
    engine = Engine.from_environ(flags=flags_of(args))
    app = create_app(engine, auth, root_path=args.root_path)
    where = "anonymous, loopback only" if auth.anonymous else (
        f"{len(auth.tokens)} token(s)")
    print(f"kiqbeat: console on http://{args.host}:{args.port}{args.root_path}/ ({where}); "
          "SIGTERM or Ctrl-C stops", flush=True)
    uvicorn.Server(server_config(
        app, args.host, args.port, root_path=args.root_path, log_level="info",
        access_log=not args.no_access_log, server_header=False,
        proxy_headers=args.proxy_headers, forwarded_allow_ips=args.forwarded_allow_ips)).run()
    engine.close()
    return 0


def _cmd_audit(args: argparse.Namespace) -> int:
    if not 1 <= args.limit <= 10_000:
        raise ConfigError("--limit must be from 1 to 10000")
    from kiqbeat.audit import read_audit
    from kiqbeat.entrypoints.outcomes import Outcome

    with opened_engine(args) as engine:
        store = engine.store()
        entries = read_audit(store.client, store.namespace, args.name, args.limit)
    return print_outcome(Outcome({"audit": [e.as_dict() for e in entries]},
                                 [e.line() for e in entries] or [
                                     "no actions recorded"
                                     + (f" for {shown(args.name)}" if args.name else "")]),
                         args.json)


def add_parser(sub: Any) -> None:
    """Register `kiqbeat web` and `kiqbeat audit`."""
    p = sub.add_parser("web", help="serve the console and its JSON API (the web extra)")
    p.add_argument("--host", default="127.0.0.1",
                   help="listen address (default 127.0.0.1; any other needs tokens)")
    p.add_argument("--port", type=int, default=8080, help="listen port (default 8080)")
    p.add_argument("--root-path", default="", metavar="PATH",
                   help="the path prefix a proxy serves the console under (e.g. /kiqbeat)")
    p.add_argument("--proxy-headers", action="store_true",
                   help="trust X-Forwarded-Proto/For from --forwarded-allow-ips (behind a "
                        "TLS-terminating proxy: cookies are then Secure)")
    p.add_argument("--forwarded-allow-ips", default="127.0.0.1", metavar="IPS",
                   help="proxies trusted with --proxy-headers (default 127.0.0.1)")
    p.add_argument("--no-access-log", action="store_true", help="log no request lines")
    add_flags(p)
    p.set_defaults(func=_cmd_web)

    p = sub.add_parser("audit", help="the audit trail: every operator action, newest first")
    p.add_argument("name", nargs="?", metavar="NAME", help="only this schedule's")
    p.add_argument("--limit", type=int, default=50, help="entries shown (default 50)")
    store_flags(p, note=False)
    p.set_defaults(func=_cmd_audit)
