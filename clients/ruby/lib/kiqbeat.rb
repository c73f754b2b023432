# kiqbeat from Ruby: KiqbeatStore (plain Redis commands, docs/store.md), KiqbeatClient
# (the console's JSON API, docs/console.md) and Kiqbeat::RunningMiddleware (Sidekiq server
# middleware for `overlap: skip`). See clients/ruby/README.md.
require_relative "kiqbeat/store"
require_relative "kiqbeat/client"
require_relative "kiqbeat/running"
