-- Loopback load on POST /v1/check: 1024 keys, limits too high to deny.
--
--   go build -o ratesync-node ./cmd/node && ./ratesync-node &
--   wrk -t2 -c32 -d30s -s cmd/node/testdata/wrk-check.lua http://127.0.0.1:8080/v1/check
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"

local n = 0
request = function()
  n = n + 1
  local body = string.format('{"namespace":"default","key":"user:%d","cost":1,"limits":[{"limit":1e12,"window":"1m"},{"limit":1e12,"window":"1s","type":"fixed"}]}', n % 1024)
  return wrk.format(nil, nil, nil, body)
end
