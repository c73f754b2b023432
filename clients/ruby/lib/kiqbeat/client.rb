# KiqbeatClient: kiqbeat's console API (docs/console.md) from Ruby, with Ruby's own net/http
# and json: create, change, pause, resume, run now, backfill and remove schedules, validated
# when they are written (an invalid definition raises ValidationError with the messages
# `kiqbeat validate` prints, naming each field).
#
#   client = KiqbeatClient.new("https://kiqbeat.internal", token: ENV.fetch("KIQBEAT_TOKEN"))
#   client.put("digest:42", "cron" => "0 9 * * *", "tz" => "Asia/Kolkata",
#                           "class" => "DigestWorker", "args" => [42])   # => :created
#   client.pause("digest:42", note: "INC-7")
#   client.trigger("digest:42", args: [43])                            # => {"jid" => ...}
#   client.each_schedule(prefix: "digest:") { |s| puts s["name"] }
#   client.remove("digest:42")
#   client.validate({ "cron" => "0 0 */2 * 1-5", "class" => "W" })["warnings"]
require "json"
require "net/http"
require "uri"

class KiqbeatClient
  # Any answer that is not a success: the status, the message and every problem.
  class Error < StandardError
    attr_reader :status, :problems

    def initialize(status, message, problems = [message])
      super(message)
      @status = status
      @problems = problems
    end
  end

  class NotFound < Error; end        # 404: no such schedule
  class Conflict < Error; end        # 409: a document's schedule (read-only here)
  class ValidationError < Error; end # 422: an invalid definition or request
  class Unauthorized < Error; end    # 401 / 403: no, a wrong, or a reader's token

  def initialize(base_url, token: nil, timeout_s: 30)
    @base = URI(base_url.to_s.chomp("/"))
    @token = token
    @timeout_s = timeout_s
  end

  # Create or replace an API-owned schedule: :created or :replaced.
  def put(name, definition, note: nil)
    headers = note ? { "X-Kiqbeat-Note" => note } : {}
    status, = request(:put, path(name), definition, headers)
    status == 201 ? :created : :replaced
  end

  # The schedule (its definition, state, next fire times, history, missed ranges), or nil.
  def get(name)
    request(:get, path(name))[1]
  rescue NotFound
    nil
  end

  # Remove an API-owned schedule: true, or false when there was none.
  def remove(name)
    request(:delete, path(name))
    true
  rescue NotFound
    false
  end

  # True when it changed (false: it was paused, or running, already).
  def pause(name, note: nil)
    request(:post, "#{path(name)}/pause", note ? { "note" => note } : nil)[1]["changed"]
  end

  def resume(name, note: nil)
    request(:post, "#{path(name)}/resume", note ? { "note" => note } : nil)[1]["changed"]
  end

  # Push one job now ("run now"), with other args if given: {"jid", "queue", "at", ...}.
  def trigger(name, args: nil, note: nil)
    body = {}
    body["args"] = args unless args.nil?
    body["note"] = note if note
    request(:post, "#{path(name)}/trigger", body)[1]
  end

  # Push the recorded missed ticks in [since, until] once each (dry_run: count them).
  def backfill(name, since: nil, until_: nil, latest_only: false, dry_run: false, note: nil)
    body = { "latest_only" => latest_only, "dry_run" => dry_run }
    body["since"] = since.respond_to?(:iso8601) ? since.iso8601 : since if since
    body["until"] = until_.respond_to?(:iso8601) ? until_.iso8601 : until_ if until_
    body["note"] = note if note
    request(:post, "#{path(name)}/backfill", body)[1]
  end

  # One page: {"items" => [...], "next_cursor" => String or nil}.
  def list(prefix: nil, state: nil, queue: nil, source: nil, cursor: nil, limit: 50)
    query = { prefix: prefix, state: state, queue: queue, source: source, cursor: cursor,
              limit: limit }.compact
    request(:get, "/api/v1/schedules?#{URI.encode_www_form(query)}")[1]
  end

  # Every schedule matching, page by page.
  def each_schedule(**filters, &block)
    return enum_for(:each_schedule, **filters) unless block

    cursor = nil
    loop do
      page = list(**filters, cursor: cursor)
      page["items"].each(&block)
      cursor = page["next_cursor"]
      break unless cursor
    end
  end

  def status
    request(:get, "/api/v1/status")[1]
  end

  def missed(*names)
    query = URI.encode_www_form(names.map { |n| ["name", n] })
    request(:get, "/api/v1/missed#{query.empty? ? "" : "?#{query}"}")[1]["missed"]
  end

  # Read one definition as `kiqbeat validate` reads it, writing nothing (a reader's token is
  # enough): {"problems" => [...], "warnings" => [...], "definition" => kiqbeat's form}.
  # format: "kiqbeat" (a document's schedule form) or "sidekiq-cron" (a job hash as
  # sidekiq-cron stores it; app_zone: the zone sidekiq-cron read zone-less crons in).
  def validate(definition, format: "kiqbeat", name: nil, app_zone: nil, now: nil)
    body = { "definition" => definition, "format" => format, "name" => name,
             "app_zone" => app_zone,
             "now" => now.respond_to?(:iso8601) ? now.iso8601 : now }.compact
    request(:post, "/api/v1/validate", body)[1]
  end

  def audit(name = nil, limit: 50)
    query = URI.encode_www_form({ name: name, limit: limit }.compact)
    request(:get, "/api/v1/audit?#{query}")[1]["audit"]
  end

  private

  # A schedule's path: its name percent-encoded as one segment ("/" as %2F).
  def path(name)
    "/api/v1/schedules/#{URI.encode_www_form_component(name.to_s).gsub("+", "%20")}"
  end

  KINDS = { put: Net::HTTP::Put, get: Net::HTTP::Get, delete: Net::HTTP::Delete,
            post: Net::HTTP::Post }.freeze

  def request(method, target, body = nil, headers = {})
    uri = URI("#{@base}#{target}")
    req = KINDS.fetch(method).new(uri)
    req["Authorization"] = "Bearer #{@token}" if @token
    req["Accept"] = "application/json"
    headers.each { |k, v| req[k] = v }
    unless body.nil?
      req["Content-Type"] = "application/json"
      req.body = JSON.generate(body)
    end
    res = Net::HTTP.start(uri.host, uri.port, use_ssl: uri.scheme == "https",
                          open_timeout: @timeout_s, read_timeout: @timeout_s) do |http|
      http.request(req)
    end
    status = res.code.to_i
    data = res.body.to_s.empty? ? nil : JSON.parse(res.body)
    return [status, data] if status < 300

    raise error_for(status, data)
  end

  def error_for(status, data)
    message = data.is_a?(Hash) ? data["error"].to_s : "HTTP #{status}"
    problems = data.is_a?(Hash) ? Array(data["problems"]) : [message]
    kind = { 404 => NotFound, 409 => Conflict, 422 => ValidationError, 401 => Unauthorized,
             403 => Unauthorized }.fetch(status, Error)
    kind.new(status, message, problems)
  end
end
