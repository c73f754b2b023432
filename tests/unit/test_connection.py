"""Redis URLs: secrets never shown, every query setting honoured."""

from __future__ import annotations

import pytest

from kiqbeat.errors import ConfigError
from kiqbeat.redis.connection import connect, scrub


@pytest.mark.parametrize(("url", "shown"), [
    ("redis://user:p@ss@h:6379/0", "redis://user:***@h:6379/0"),
    ("redis://:ab/cd@h", "redis://:***@h"),
    ("rediss://token@h", "rediss://***@h"),
    ("redis://h?password=s3cret&db=2", "redis://h?password=***&db=2"),
    ("redis+sentinel://u:pw@h1:1,h2:2/svc", "redis+sentinel://u:***@h1:1,h2:2/svc"),
    ("redis://h:6379/0", "redis://h:6379/0"),
])
def test_scrub_hides_any_password_whatever_its_characters(url: str, shown: str) -> None:
    assert scrub(url) == shown


def test_query_settings_reach_the_client_and_tls_files_go_as_arguments() -> None:
    client = connect("unix:///tmp/kiqbeat-none.sock?db=3&ssl_ca_certs=/x/ca.pem")
    assert client.connection_pool.connection_kwargs["db"] == 3
    client = connect("rediss://h:6380/0?ssl_ca_certs=/x/ca.pem")
    assert client.connection_pool.connection_kwargs["ssl_ca_certs"] == "/x/ca.pem"


def test_an_unparsable_url_is_refused_without_quoting_the_password() -> None:
    with pytest.raises(ConfigError) as caught:
        connect("redis://:hunter2/x@h:6379")
    assert "hunter2" not in str(caught.value)
