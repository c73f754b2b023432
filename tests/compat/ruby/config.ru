# Sidekiq's web UI for kiqbeat's compatibility tests: `puma -b tcp://127.0.0.1:PORT config.ru`
# with REDIS_URL set. Sidekiq::Web needs a session middleware (without one every page is a
# 500); the secret is random per process because nothing outlives the test.
require "securerandom"
require "rack/session/cookie"
require "sidekiq"
require "sidekiq/web"

Sidekiq.configure_client { |config| config.redis = { url: ENV.fetch("REDIS_URL") } }

use Rack::Session::Cookie, secret: SecureRandom.hex(64), same_site: true, max_age: 3600
run Sidekiq::Web
