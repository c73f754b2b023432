# kiqbeat from Ruby: KiqbeatStore (plain Redis commands, docs/store.md) and KiqbeatClient
# (the console's JSON API, docs/console.md). See clients/ruby/README.md.
require_relative "kiqbeat/store"
require_relative "kiqbeat/client"
