-- wrk script: every request adds an order (POST /orders), 1 in 50 declined (amount ends in 13).
local n = 0
request = function()
  n = n + 1
  local cents = (n % 50 == 0) and 1013 or (500 + n % 9000)
  local body = string.format('{"customer":"customer-%d","amount_cents":%d}', n % 100, cents)
  return wrk.format("POST", "/orders", {["Content-Type"] = "application/json"}, body)
end
