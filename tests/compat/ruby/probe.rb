# Prints, as one JSON document, what Sidekiq's API reads from Redis (REDIS_URL):
# every queue named in ARGV with its size, latency and jobs, and the retry and dead sets.
require "json"
require "sidekiq"
require "sidekiq/api"

RECORD = defined?(Sidekiq::JobRecord) ? Sidekiq::JobRecord : Sidekiq::Job

def job_view(job)
  {
    "jid" => job.jid,
    "display_class" => job.display_class,
    "display_args" => job.display_args,
    "queue" => job.queue,
    "enqueued_at" => job.enqueued_at&.to_f,
    "enqueued_year" => job.enqueued_at&.year,
    "created_at" => job.created_at.to_f,
    "created_year" => job.created_at.year,
    "latency" => job.latency,
    "retry_count" => job["retry_count"],
    "error_class" => job["error_class"],
    "item" => job.item
  }
end

queues = ARGV.map do |name|
  queue = Sidekiq::Queue.new(name)
  [name, { "size" => queue.size, "latency" => queue.latency, "jobs" => queue.map { |j| job_view(j) } }]
end.to_h

puts JSON.generate(
  "sidekiq" => Sidekiq::VERSION,
  "now" => Time.now.to_f,
  "queues" => queues,
  "scheduled" => Sidekiq::ScheduledSet.new.map { |j| job_view(j).merge("at" => j.at.to_f) },
  "retries" => Sidekiq::RetrySet.new.map { |j| job_view(j) },
  "dead" => Sidekiq::DeadSet.new.map { |j| job_view(j) }
)
