# Writes kiqbeat's schedule store from Ruby with plain Redis commands (docs/store.md).
#
# The KiqbeatStore module is the Ruby client's (clients/ruby/lib/kiqbeat/store.rb), which
# docs/store.md prints; tests/compat/test_store_protocol.py checks that it prints it
# verbatim and runs it against kiqbeat. Here, a command line for the tests:
#
#   REDIS_URL=... [KIQBEAT_NAMESPACE=...] [KIQBEAT_SHARDS=N] ruby store_writer.rb 'COMMANDS'
#
# COMMANDS is a JSON list of [operation, name, argument...]: put NAME DEFINITION, remove NAME,
# pause NAME, resume NAME, raw NAME TEXT (HSET + HDEL + ZADD of TEXT as it is), due_key NAME,
# migrate_sidekiq_cron TZ [TIMEOUT_S [FIELDS]]. It prints one JSON list of the results, in order; an
# operation that raises KiqbeatStore::Error gives {"error": message}.
require "json"
require "redis"
require "zlib"

require_relative "../../../clients/ruby/lib/kiqbeat/store"

if $PROGRAM_NAME == __FILE__
  redis = Redis.new(url: ENV.fetch("REDIS_URL"))
  ns = ENV.fetch("KIQBEAT_NAMESPACE", "")
  shards = Integer(ENV.fetch("KIQBEAT_SHARDS", "1"))
  results = JSON.parse(ARGV.fetch(0)).map do |operation, name, *rest|
    case operation
    when "put" then KiqbeatStore.put(redis, name, rest.fetch(0), ns: ns, shards: shards)
    when "remove" then KiqbeatStore.remove(redis, name, ns: ns, shards: shards)
    when "pause" then KiqbeatStore.pause(redis, name, ns: ns, shards: shards)
    when "resume" then KiqbeatStore.resume(redis, name, ns: ns, shards: shards)
    when "skip" then KiqbeatStore.skip(redis, name, rest.fetch(0), ns: ns)
    when "due_key" then KiqbeatStore.due_key(name, ns, shards)
    when "raw"
      redis.multi do |tx|
        KiqbeatStore.writes(name, rest.fetch(0), ns, shards).each { |c| tx.public_send(*c) }
      end
      true
    when "migrate_sidekiq_cron" # NAME is the zone here
      KiqbeatStore.migrate_sidekiq_cron(redis, tz: name, ns: ns, shards: shards,
                                               timeout_s: Float(rest.fetch(0, 300)),
                                               fields: rest.fetch(1, {}))
    else raise ArgumentError, "unknown operation #{operation.inspect}"
    end
  rescue KiqbeatStore::Error => e
    { "error" => e.message }
  end
  puts JSON.generate(results)
end
