workload flags {
  session s { user "hi"; reply 4 label warm; user "more"; reply 4 label again }
  gates { a: overall count(ok{warm}) >= 1 }
}
