workload w {
  session main {
    spawn 3 cold {
      user filler 1k
      probe as ctx
    }
    for i in reverse 0..3 until miss {
      resend cxt[$i] max_tokens 1
    }
  }
}
