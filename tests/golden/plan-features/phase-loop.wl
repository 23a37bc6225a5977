workload phase_loop {
  session s repeat 2 {
    repeat 2 as i {
      phase grow { user filler 100; reply 4 label g }
      phase flood { user "flood"; reply 4 label f }
    }
  }
  gates { grown: each session count(ok{grow}) == 2 }
}
