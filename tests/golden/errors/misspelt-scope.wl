# The parser only notices at `{`; the mistake is two words earlier.
workload w {
  session main { turn t { user "hi"; reply 1 } }
  gates {
    fast: overal ttft{t} < 2s
  }
}
