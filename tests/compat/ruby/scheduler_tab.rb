# Reads (and toggles) kiqbeat's sidekiq-scheduler keys exactly as that gem's Recurring Jobs
# tab does (sidekiq-scheduler 5.x: Schedule#get_all_schedules, JobPresenter#next_time and
# #last_time, Scheduler#job_enabled? and #toggle_job_enabled), without the gem itself,
# which Debian does not package. REDIS_URL selects the server.
#
#   ruby scheduler_tab.rb read          -> JSON: one entry per schedule, as the tab shows it
#   ruby scheduler_tab.rb toggle NAME   -> flips NAME like the tab's Enable/Disable button
require "json"
require "time"
require "sidekiq"

STATES = "sidekiq-scheduler:states"

def specs
  Sidekiq.redis { |r| r.hgetall("schedules") }.transform_values { |v| JSON.parse(v) }
end

def state(name)
  raw = Sidekiq.redis { |r| r.hget(STATES, name) }
  raw ? JSON.parse(raw) : {}
end

def enabled?(name, spec)
  state(name).fetch("enabled", spec.fetch("enabled", true)) if spec
end

def parsed_time(key, name)
  raw = Sidekiq.redis { |r| r.hget(key, name) }
  raw && Time.parse(raw)
end

case ARGV[0]
when "read"
  out = specs.sort.map do |name, spec|
    next_time = parsed_time("sidekiq-scheduler:next_times", name)
    last_time = parsed_time("sidekiq-scheduler:last_times", name)
    [name, {
      "class" => spec["class"],
      "queue" => spec.fetch("queue", "default"),
      "args" => spec["args"],
      "description" => spec["description"],
      "interval" => spec["cron"] || spec["interval"] || spec["every"] || spec["at"] || spec["in"],
      "enabled" => enabled?(name, spec),
      "next_time" => next_time&.to_f,
      "next_time_iso" => next_time&.utc&.iso8601,
      "last_time" => last_time&.to_f
    }]
  end.to_h
  puts JSON.generate(out)
when "toggle"
  name = ARGV.fetch(1)
  new_state = state(name)
  new_state["enabled"] = !enabled?(name, specs[name])
  Sidekiq.redis { |r| r.hset(STATES, name, JSON.generate(new_state)) }
else
  abort "usage: scheduler_tab.rb read | toggle NAME"
end
