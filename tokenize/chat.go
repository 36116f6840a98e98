package tokenize

type chatRenderer struct{}

func newChatRenderer(src string, specials map[string]any) (*chatRenderer, error) {
	return &chatRenderer{}, nil
}
